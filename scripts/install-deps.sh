#!/usr/bin/env bash
# Installs the system packages the whole workspace needs on a Debian/Ubuntu machine.
# Idempotent: packages already present are skipped, so a second run costs a few dpkg queries.
#
# Why each package:
#   cmake, clang, libclang-dev  llama-cpp-sys-2 builds llama.cpp with cmake and runs bindgen (libclang)
#   pkg-config, build-essential C/C++ toolchain pieces used by -sys crates
#   tmux                        end-to-end tests of bmoe-top in a real terminal
#   openssh-server              bmoe-bench tests of the `ssh` device against a local sshd
#
# Opt-in (`--prefill-device`, or BMOE_PREFILL_DEVICE=1): the Vulkan build of llama.cpp for the
# engine's `prefill-device` feature, tested on Mesa's CPU Vulkan driver (lavapipe):
#   glslc                       compiles ggml's Vulkan compute shaders at build time
#   libvulkan-dev               Vulkan loader + headers the ggml-vulkan backend links against
#   mesa-vulkan-drivers         lavapipe, a Vulkan device on any machine (no GPU needed)
#   spirv-headers               ggml-vulkan's CMake requires SPIRV-Headers (find_package CONFIG)
#   vulkan-tools                vulkaninfo, to check which Vulkan devices the machine offers
# The default set stays CPU-only: the README's two commands never pull these in.
set -euo pipefail

PACKAGES=(
  cmake
  clang
  libclang-dev
  pkg-config
  build-essential
  tmux
  openssh-server
)

PREFILL_DEVICE="${BMOE_PREFILL_DEVICE:-0}"
for arg in "$@"; do
  case "$arg" in
    --prefill-device) PREFILL_DEVICE=1 ;;
    *)
      echo "error: unknown argument '$arg'" >&2
      echo "hint: scripts/install-deps.sh [--prefill-device]" >&2
      exit 2
      ;;
  esac
done
if [ "$PREFILL_DEVICE" = "1" ]; then
  PACKAGES+=(glslc libvulkan-dev spirv-headers mesa-vulkan-drivers vulkan-tools)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all system packages present" >&2
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: missing system packages: ${missing[*]}" >&2
  echo "hint: this script knows apt-get only; install them with your package manager" >&2
  exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "error: need root to install: ${missing[*]}" >&2
    echo "hint: re-run as root or install them by hand" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done" >&2

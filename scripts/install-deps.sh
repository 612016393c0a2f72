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
# plus newer Vulkan *headers* in a project-local prefix (.deps/prefill-device/usr): the vendored
# ggml-vulkan needs Vulkan-Headers >= 1.3.275 (vk::LayerSettingEXT), Debian 12 ships 1.3.239 and
# bookworm-backports has none newer. The script fetches Debian 13 (trixie)'s libvulkan-dev and
# spirv-headers .debs with `apt-get download` through a private apt state (a trixie source used for
# that download only: the system's sources and dpkg database stay untouched) and unpacks only
# their headers and CMake config with `dpkg-deb -x`. Headers are arch-free and the 1.3.239 loader
# keeps its ABI, so the system's libvulkan1 and libc stay as they are.
# scripts/prefill-device-env.sh points CMake at that prefix for the feature's build.
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

# Installs the packages in `missing` with apt-get.
install_missing() {
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
}

# The trixie Vulkan headers (see the top): private apt state under $DEPS/apt, headers + CMake
# config in $DEPS/usr. Skipped when the wanted version is already unpacked.
install_vulkan_headers() {
  local repo deps stamp want apt_opts
  repo="$(cd "$(dirname "$0")/.." && pwd)"
  deps="$repo/.deps/prefill-device"
  stamp="$deps/usr/.versions"
  want="libvulkan-dev spirv-headers"
  if [ -f "$stamp" ] && [ -f "$deps/usr/include/vulkan/vulkan.hpp" ]; then
    echo "install-deps: Vulkan headers present ($(tr '\n' ' ' <"$stamp"))" >&2
    return 0
  fi
  mkdir -p "$deps/apt/lists/partial" "$deps/apt/cache/archives/partial" "$deps/apt/sources.list.d" \
    "$deps/apt/preferences.d" "$deps/debs"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    >"$deps/apt/sources.list"
  apt_opts=(
    -o "Dir::Etc::SourceList=$deps/apt/sources.list"
    -o "Dir::Etc::SourceParts=$deps/apt/sources.list.d"
    -o "Dir::Etc::Preferences=/dev/null"
    -o "Dir::Etc::PreferencesParts=$deps/apt/preferences.d"
    -o "Dir::State::Lists=$deps/apt/lists"
    -o "Dir::Cache=$deps/apt/cache"
    -o "APT::Sandbox::User=$(id -un)"
    -o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::CNF::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false"
  )
  echo "install-deps: fetching Debian trixie's $want (headers only) into $deps/usr" >&2
  apt-get "${apt_opts[@]}" update -qq
  rm -f "$deps/debs/"*.deb
  (cd "$deps/debs" && apt-get "${apt_opts[@]}" download $want >/dev/null)
  rm -rf "$deps/root" "$deps/usr"
  local deb
  for deb in "$deps/debs/"*.deb; do
    dpkg-deb -x "$deb" "$deps/root"
    dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb" >>"$deps/root/.versions"
  done
  # headers and the SPIRV-Headers CMake config only: no loader library, so the system's
  # libvulkan1 is what links and runs
  mkdir -p "$deps/usr/share"
  mv "$deps/root/usr/include" "$deps/usr/include"
  mv "$deps/root/usr/share/cmake" "$deps/usr/share/cmake"
  mv "$deps/root/.versions" "$stamp"
  rm -rf "$deps/root"
  echo "install-deps: Vulkan headers $(tr '\n' ' ' <"$stamp")in $deps/usr" >&2
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all system packages present" >&2
else
  install_missing
fi
if [ "$PREFILL_DEVICE" = "1" ]; then
  install_vulkan_headers
fi


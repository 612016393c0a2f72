#!/usr/bin/env bash
# Source this before building the engine's `prefill-device` feature:
#   source scripts/prefill-device-env.sh && cargo build --release -p bmoe-engine --features prefill-device
# It points llama.cpp's CMake (llama-cpp-sys-2 forwards CMAKE_* variables) at the Vulkan and
# SPIR-V headers that `scripts/install-deps.sh --prefill-device` unpacked into .deps/prefill-device
# (newer than Debian 12's, which the vendored ggml-vulkan cannot compile against), and gives the
# feature's build a target dir of its own so it never rebuilds the default CPU-only llama.cpp.
# Not needed where the system's Vulkan headers are >= 1.3.275 (any Vulkan SDK, Debian 13).
_bmoe_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_bmoe_vk="$_bmoe_repo/.deps/prefill-device/usr"
if [ -f "$_bmoe_vk/include/vulkan/vulkan.hpp" ]; then
  export CMAKE_PREFIX_PATH="$_bmoe_vk${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
else
  echo "prefill-device-env: no project-local Vulkan headers in $_bmoe_vk; using the system's" >&2
  echo "hint: scripts/install-deps.sh --prefill-device fetches them" >&2
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$_bmoe_repo/target}/prefill-device"
unset _bmoe_repo _bmoe_vk

#!/usr/bin/env bash
# Opt-in check of the `prefill-device` feature (issue #22): installs the Vulkan packages
# (lavapipe: a Vulkan device on any machine), builds bmoe-engine with llama.cpp's Vulkan backend
# and runs the device tests. Not part of .ci/run: the Vulkan build of llama.cpp is slow.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --prefill-device
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/prefill-device"
nice -n 10 cargo test -p bmoe-engine --features prefill-device --lib cli::device
nice -n 10 cargo test -p bmoe-engine --features prefill-device --test it devices::
# the build must see the Vulkan device, and `--list-devices` must show it
nice -n 10 cargo build -p bmoe-engine --features prefill-device --bin bmoe-cli
listing="$("$CARGO_TARGET_DIR/debug/bmoe-cli" --list-devices)"
echo "$listing"
if ! grep -q '^Vulkan' <<<"$listing"; then
  echo "error: the prefill-device build lists no Vulkan device" >&2
  echo "hint: check \`vulkaninfo --summary\` (mesa-vulkan-drivers provides lavapipe)" >&2
  exit 1
fi

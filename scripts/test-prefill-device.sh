#!/usr/bin/env bash
# Opt-in check of the `prefill-device` feature (issue #22): installs the Vulkan packages and the
# project-local Vulkan headers (lavapipe: a Vulkan device on any machine), builds bmoe-engine with
# llama.cpp's Vulkan backend in a target dir of its own (<target>/prefill-device) and runs the
# device tests, then lints the feature's code (clippy -D warnings: scripts/lint.sh checks the
# default build only). .ci/run runs it as a step of its own; docs/engine.md gives its cost.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --prefill-device
# shellcheck source=scripts/prefill-device-env.sh
source scripts/prefill-device-env.sh
NICE="${BMOE_NICE:-10}"
nice -n "$NICE" cargo test --locked -p bmoe-engine --features prefill-device --lib -- cli::device ffi::vulkan
nice -n "$NICE" cargo test --locked -p bmoe-engine --features prefill-device --test it devices::
nice -n "$NICE" cargo test --locked -p bmoe-engine --features prefill-device --test it prefill_device::
# the build must see the Vulkan device, and `--list-devices` must show it
nice -n "$NICE" cargo build --locked -p bmoe-engine --features prefill-device --bin bmoe-cli
listing="$("$CARGO_TARGET_DIR/debug/bmoe-cli" --list-devices)"
echo "$listing"
if ! grep -q '^Vulkan' <<<"$listing"; then
  echo "error: the prefill-device build lists no Vulkan device" >&2
  echo "hint: check \`vulkaninfo --summary\` (mesa-vulkan-drivers provides lavapipe)" >&2
  exit 1
fi
nice -n "$NICE" cargo clippy --locked -p bmoe-engine --features prefill-device --all-targets -- -D warnings

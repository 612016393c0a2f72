#!/usr/bin/env bash
# The lints CI enforces: formatting, and clippy with every warning an error, on every target of
# the workspace. Run after scripts/test.sh (it reuses that build's dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings

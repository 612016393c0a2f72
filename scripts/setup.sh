#!/usr/bin/env bash
# One-command set-up: installs what a fresh Debian machine lacks, builds the release binaries,
# and runs the main job on the built-in default model (a tiny synthetic MoE model the tools
# make themselves, so no download and no real weights are needed).
# Idempotent: a second run only rebuilds what changed and reuses the synthesised model.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*" >&2; }

scripts/install-deps.sh

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found" >&2
  echo "hint: install Rust with rustup (https://rustup.rs), then re-run scripts/setup.sh" >&2
  exit 1
fi

say "building release binaries (a cold build compiles llama.cpp: a few minutes on 2 cores)"
cargo build --release --locked --workspace --bins

BIN="${CARGO_TARGET_DIR:-target}/release"
if [ ! -x "$BIN/bmoe-cli" ]; then
  echo "error: the build finished but $BIN/bmoe-cli is missing" >&2
  echo "hint: if CARGO_TARGET_DIR or .cargo/config.toml moves the target dir elsewhere, point CARGO_TARGET_DIR at it and re-run" >&2
  exit 1
fi
say "running the main job: bmoe-cli streams the tiny synthetic model's experts from disk"
# without --progress: the answer, the summary lines and (on a terminal) the digest a person reads;
# --progress adds the per-token BMOE_* protocol lines that bmoe-top and apps parse
"$BIN/bmoe-cli" --moe-stream --cache-mb 2 -p "hello" -n 32
say "done (add --progress for the per-token BMOE_* lines bmoe-top reads; see README.md)"

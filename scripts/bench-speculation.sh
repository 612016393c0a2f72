#!/usr/bin/env bash
# `--prefetch K` on `--overlap`'s asynchronous lanes against `--overlap` alone, on one model:
# adjacent interleaved pairs (scripts/bench-ab.sh: the model dropped from the page cache, that
# file only, before every run; s/token and CPU-s/token per pair; the pseudo-random token feed),
# at a 1 GiB and a 4 GiB cache, for each K. Then, per run with prefetch, what the speculation
# cost and bought (scripts/spec_report.py): flash MiB/token, the speculative share of it, and
# the useful fraction of the experts read ahead.
#
# usage: scripts/bench-speculation.sh MODEL [OUT_DIR]
#   OUT_DIR default bench-data/$(date -u +%F)-speculation
# env: PAIRS (3), N (32), THREADS (2), KS ("1 2"), CONFIGS (bench-ab's, default
#      "c1024: --cache-mb 1024; c4096: --cache-mb 4096"), OVERLAP_FLAGS (default "--overlap"),
#      CGROUP_GIB (empty = none), BIN (default: release build)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

MODEL="${1:?usage: scripts/bench-speculation.sh MODEL [OUT_DIR]}"
OUT="${2:-bench-data/$(date -u +%F)-speculation}"
export PAIRS="${PAIRS:-3}" N="${N:-32}" THREADS="${THREADS:-2}"
KS="${KS:-1 2}"
CONFIGS="${CONFIGS:-c1024: --cache-mb 1024; c4096: --cache-mb 4096}"
OVERLAP_FLAGS="${OVERLAP_FLAGS:---overlap}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
die() { printf 'error: %s\nhint: %s\n' "$1" "$2" >&2; exit 1; }
for k in $KS; do
  case "$k" in '' | *[!0-9]* | 0) die "KS='$KS' holds '$k', not a depth >= 1" "KS='1 2'" ;; esac
done
if [ -z "${BIN:-}" ]; then
  cargo build --release -p bmoe-engine --bin bmoe-cli >&2
  BIN="$CARGO_TARGET_DIR/release/bmoe-cli"
fi
export BIN
mkdir -p "$OUT"

for k in $KS; do
  LABEL_A=off LABEL_B="prefetch$k" A_FLAGS="$OVERLAP_FLAGS" B_FLAGS="$OVERLAP_FLAGS --prefetch $k" \
    CONFIGS="$CONFIGS" CGROUP_GIB="${CGROUP_GIB:-}" scripts/bench-ab.sh "$MODEL" "$OUT/prefetch$k"
done
python3 scripts/spec_report.py "$OUT" | tee "$OUT/speculation.txt"

#!/usr/bin/env bash
# --overlap against the serial path on one model: adjacent interleaved pairs (scripts/bench-ab.sh),
# the model dropped from the page cache (that file only) before every run, at cache off, 1 GiB
# and 4 GiB, and `--cache-mb auto` inside a memory cgroup; for both overlap kinds (userfaultfd
# and staged). Then the bound each overlap run is held to: max(resident compute, miss bytes ÷
# the serial run's read bandwidth), resident compute from a plain run with the whole file cached.
#
# usage: scripts/bench-overlap.sh MODEL [OUT_DIR]
#   OUT_DIR default bench-data/$(date +%F)-overlap
# env: PAIRS (3), N (32), THREADS (2), CGROUP_GIB (8; empty skips the cgroup runs), KINDS
#      ("uffd staged"), CONFIGS (bench-ab's, default "c0: --cache-mb 0; c1024: --cache-mb 1024;
#      c4096: --cache-mb 4096"), BIN (default: release build)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

MODEL="${1:?usage: scripts/bench-overlap.sh MODEL [OUT_DIR]}"
OUT="${2:-bench-data/$(date -u +%F)-overlap}"
export PAIRS="${PAIRS:-3}" N="${N:-32}" THREADS="${THREADS:-2}"
CGROUP_GIB="${CGROUP_GIB-8}"
KINDS="${KINDS:-uffd staged}"
CONFIGS="${CONFIGS:-c0: --cache-mb 0; c1024: --cache-mb 1024; c4096: --cache-mb 4096}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
if [ -z "${BIN:-}" ]; then
  cargo build --release -p bmoe-engine --bin bmoe-cli >&2
  BIN="$CARGO_TARGET_DIR/release/bmoe-cli"
fi
export BIN
mkdir -p "$OUT"

for kind in $KINDS; do
  LABEL_A=serial LABEL_B="overlap-$kind" B_FLAGS="--overlap --overlap-kind $kind" CONFIGS="$CONFIGS" \
    scripts/bench-ab.sh "$MODEL" "$OUT/$kind"
  if [ -n "$CGROUP_GIB" ]; then
    LABEL_A=serial LABEL_B="overlap-$kind" B_FLAGS="--overlap --overlap-kind $kind" \
      CONFIGS="auto-cg$CGROUP_GIB: --cache-mb auto" CGROUP_GIB="$CGROUP_GIB" \
      scripts/bench-ab.sh "$MODEL" "$OUT/$kind-cgroup"
  fi
done

# resident compute: plain llama.cpp with the whole file in the page cache
say() { printf 'bench-overlap: %s\n' "$*" >&2; }
say "resident run (warming the page cache with the whole model)"
dd if="$MODEL" of=/dev/null bs=16M status=none
"$BIN" -m "$MODEL" -p "The capital of Japan is" -n "$N" -t "$THREADS" -c 512 --feed-random 42 \
  --csv "$OUT/resident.csv" > "$OUT/resident.out" 2> "$OUT/resident.err"
python3 scripts/overlap_bound.py "$OUT" | tee "$OUT/bound.txt"

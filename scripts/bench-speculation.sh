#!/usr/bin/env bash
# Speculative expert reads on `--overlap`'s asynchronous lanes against `--overlap` alone, on one
# model: adjacent interleaved pairs (scripts/bench-ab.sh: the model dropped from the page cache,
# that file only, before every run; s/token and CPU-s/token per pair; the pseudo-random token
# feed), at a 1 GiB and a 4 GiB cache, for each variant. Then, per run, what the speculation cost
# and bought (scripts/spec_report.py): flash MiB/token, the speculative share of it, the useful
# fraction of the experts read ahead, the cache hit rate and (route-ahead) the agreement.
#
# usage: scripts/bench-speculation.sh MODEL [OUT_DIR]
#   OUT_DIR default bench-data/$(date -u +%F)-speculation
# env: PAIRS (3), N (32), THREADS (2),
#      VARIANTS (default "prefetch<K>" for each K of KS): each one of
#        prefetch<K>  --prefetch K
#        predict      --predict-prefetch
#        ra<N>        --route-ahead N (lossy: its text differs where the agreement is below 100 %)
#      KS ("1 2"; only when VARIANTS is unset),
#      PREDICT_LOG (1 = also one `--predict-log` run on the first config, into OUT_DIR/predict-log:
#        the stale-gate / previous-token / control accuracy next to the speeds),
#      CONFIGS (bench-ab's, default "c1024: --cache-mb 1024; c4096: --cache-mb 4096"),
#      OVERLAP_FLAGS (default "--overlap"), CGROUP_GIB (empty = none), BIN (default: release build)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

MODEL="${1:?usage: scripts/bench-speculation.sh MODEL [OUT_DIR]}"
OUT="${2:-bench-data/$(date -u +%F)-speculation}"
export PAIRS="${PAIRS:-3}" N="${N:-32}" THREADS="${THREADS:-2}"
KS="${KS:-1 2}"
VARIANTS="${VARIANTS:-$(for k in $KS; do printf 'prefetch%s ' "$k"; done)}"
PREDICT_LOG="${PREDICT_LOG:-0}"
CONFIGS="${CONFIGS:-c1024: --cache-mb 1024; c4096: --cache-mb 4096}"
OVERLAP_FLAGS="${OVERLAP_FLAGS:---overlap}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
die() { printf 'error: %s\nhint: %s\n' "$1" "$2" >&2; exit 1; }
# the flags a variant name stands for
variant_flags() {
  case "$1" in
    prefetch[1-9]) echo "--prefetch ${1#prefetch}" ;;
    predict) echo "--predict-prefetch" ;;
    ra[1-8]) echo "--route-ahead ${1#ra}" ;;
    *) return 1 ;;
  esac
}
for v in $VARIANTS; do
  variant_flags "$v" > /dev/null \
    || die "VARIANTS='$VARIANTS' holds '$v', not a variant" "VARIANTS='prefetch1 predict ra1' (prefetch<K>, predict, ra<N>)"
done
if [ -z "${BIN:-}" ]; then
  cargo build --release -p bmoe-engine --bin bmoe-cli >&2
  BIN="$CARGO_TARGET_DIR/release/bmoe-cli"
fi
export BIN
mkdir -p "$OUT"

for v in $VARIANTS; do
  LABEL_A=off LABEL_B="$v" A_FLAGS="$OVERLAP_FLAGS" B_FLAGS="$OVERLAP_FLAGS $(variant_flags "$v")" \
    CONFIGS="$CONFIGS" CGROUP_GIB="${CGROUP_GIB:-}" scripts/bench-ab.sh "$MODEL" "$OUT/$v"
done
if [ "$PREDICT_LOG" = 1 ]; then
  # one instrumented run: how often each predictor names the router's experts
  first="${CONFIGS%%;*}"
  mkdir -p "$OUT/predict-log"
  dd if="$MODEL" iflag=nocache count=0 status=none 2>/dev/null || true
  echo "loadavg_before=$(cut -d' ' -f1-3 /proc/loadavg) config='$first'" > "$OUT/predict-log/env.txt"
  # shellcheck disable=SC2086 # the flag lists are word lists
  "$BIN" -m "$MODEL" -p "The capital of Japan is" -n "$N" -t "$THREADS" -c 512 \
    --feed-random "${FEED_SEED:-42}" --moe-stream $OVERLAP_FLAGS ${first#*:} --predict-log \
    --csv "$OUT/predict-log/run.csv" > "$OUT/predict-log/run.out" 2> "$OUT/predict-log/run.err"
  echo "loadavg_after=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/predict-log/env.txt"
fi
python3 scripts/spec_report.py "$OUT" | tee "$OUT/speculation.txt"

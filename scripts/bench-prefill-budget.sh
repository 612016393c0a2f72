#!/usr/bin/env bash
# Prefill under an expert-cache budget: wall time and peak RSS of a long prompt's prefill,
# streamed at several --cache-mb values, each as a ratio to the unconstrained streamed run.
# Issue #21 asks for: cache0 peak <= cache1 peak, and cache1 wall within ~3x of unconstrained.
# With BIN_BEFORE (an older bmoe-cli, e.g. one built from main before a change) the same runs
# are measured with it too and printed as a "before" table above the "after" one (BIN).
#
# usage: scripts/bench-prefill-budget.sh [MODEL] [OUT_DIR]
#   MODEL    default: a synthetic model made in OUT_DIR (PRESET, default tiny)
#   OUT_DIR  default bench-data/$(date -u +%F)-prefill-budget
# env: BIN (bmoe-cli; default the debug build in $CARGO_TARGET_DIR), BIN_BEFORE (optional older
#      bmoe-cli for the before/after comparison), BENCH (bmoe-bench, same),
#      PRESET (synth preset, default tiny), PROMPT_WORDS (default 80: about 630 tokens on the byte-level synthetic vocabulary),
#      REPS (default 3: the best wall of REPS runs is kept; RSS is the max), THREADS (default 2),
#      RUNS (default "unconstrained cache0 cache1 cache0-ub64"; entries are NAME or
#      cacheMIB[-ubN], "unconstrained" = --moe-stream with a cache that holds every expert:
#      --cache-mb of the model's size; without --cache-mb the cache is off, i.e. cache0).
# Peak RSS is /usr/bin/time -v's "Maximum resident set size"; wall is the CLI's own prefill_s
# from the --csv summary line (prefill_s=), else the whole process's elapsed time (-n 1).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

OUT="${2:-bench-data/$(date -u +%F)-prefill-budget}"
PRESET="${PRESET:-tiny}"
PROMPT_WORDS="${PROMPT_WORDS:-80}"
REPS="${REPS:-3}"
THREADS="${THREADS:-2}"
RUNS="${RUNS:-unconstrained cache0 cache1 cache0-ub64}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
BIN="${BIN:-$CARGO_TARGET_DIR/debug/bmoe-cli}"
BENCH="${BENCH:-$CARGO_TARGET_DIR/debug/bmoe-bench}"

die() { printf 'error: %s\nhint: %s\n' "$1" "$2" >&2; exit 1; }
[ -x /usr/bin/time ] || die "/usr/bin/time not found" "apt-get install time (GNU time, for -v)"
[ -x "$BIN" ] || die "bmoe-cli not found: $BIN" "cargo build -p bmoe-engine --bin bmoe-cli, or set BIN"
case "$REPS" in '' | *[!0-9]* | 0) die "REPS='$REPS' is not a positive whole number" "REPS=3" ;; esac
mkdir -p "$OUT"
MODEL="${1:-$OUT/$PRESET.gguf}"
if [ ! -f "$MODEL" ]; then
  [ -z "${1:-}" ] || die "model not found: $MODEL" "omit MODEL to synthesise one (PRESET=$PRESET)"
  [ -x "$BENCH" ] || die "bmoe-bench not found: $BENCH" "cargo build -p bmoe-bench, or set BENCH"
  "$BENCH" model synth --preset "$PRESET" -o "$MODEL" >&2
fi
WHOLE_MB=$(($(stat -c %s "$MODEL") / 1048576 + 1))
PROMPT_FILE="$OUT/prompt.txt"
# deterministic filler text: the same prompt every run
awk -v n="$PROMPT_WORDS" 'BEGIN { for (i = 0; i < n; i++) printf "word%d ", (i * 7919) % 1000; print "" }' >"$PROMPT_FILE"

run_one() { # BIN TAG NAME -> prints "wall_s rss_mb"
  local bin="$1" tag="$2" name="$3" args=(--moe-stream)
  case "$name" in
    unconstrained) args+=(--cache-mb "$WHOLE_MB") ;;
    cache*-ub*) local c="${name#cache}"; args+=(--cache-mb "${c%%-ub*}" --ubatch "${name##*-ub}") ;;
    cache*) args+=(--cache-mb "${name#cache}") ;;
    *) die "unknown run '$name' in RUNS" "entries: unconstrained, cacheN, cacheN-ubM" ;;
  esac
  local log="$OUT/$tag$name.time" csv="$OUT/$tag$name.csv" err="$OUT/$tag$name.err"
  rm -f "$csv"
  /usr/bin/time -v -o "$log" "$bin" -m "$MODEL" -f "$PROMPT_FILE" -n 1 -t "$THREADS" \
    "${args[@]}" --csv "$csv" >"$OUT/$tag$name.out" 2>"$err" ||
    die "run '$name' with $bin failed (see $err)" "run the same bmoe-cli command by hand"
  local rss wall
  rss=$(awk -F': ' '/Maximum resident set size/ { printf "%.1f", $2 / 1024 }' "$log")
  wall=$(grep -ao 'prefill_s=[0-9.]*' "$csv" 2>/dev/null | head -1 | grep -o '[0-9.]*$' || true)
  if [ -z "$wall" ]; then
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }' "$log")
  fi
  echo "$wall $rss"
}

measure() { # BIN TAG -> fills WALL and RSS
  local bin="$1" tag="$2" name best peak w r
  for name in $RUNS; do
    best="" peak=0
    for _ in $(seq "$REPS"); do
      read -r w r < <(run_one "$bin" "$tag" "$name")
      best=$(awk -v a="$best" -v b="$w" 'BEGIN { print (a == "" || b < a) ? b : a }')
      peak=$(awk -v a="$peak" -v b="$r" 'BEGIN { print (b > a) ? b : a }')
    done
    WALL[$name]=$best RSS[$name]=$peak
  done
}

table() { # TITLE: the runs as ratios to the unconstrained one
  local base=unconstrained name wx rx
  echo "$1"
  printf '%-16s %10s %10s %10s %10s\n' run wall_s peak_mb wall_x rss_x
  for name in $RUNS; do
    if [ -n "${WALL[$base]:-}" ]; then
      wx=$(awk -v a="${WALL[$name]}" -v b="${WALL[$base]}" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')
      rx=$(awk -v a="${RSS[$name]}" -v b="${RSS[$base]}" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')
    else wx=- rx=-; fi
    printf '%-16s %10s %10s %10s %10s\n' "$name" "${WALL[$name]}" "${RSS[$name]}" "$wx" "$rx"
  done
}

declare -A WALL RSS
{
  if [ -n "${BIN_BEFORE:-}" ]; then
    [ -x "$BIN_BEFORE" ] || die "BIN_BEFORE not executable: $BIN_BEFORE" "point it at an older bmoe-cli"
    measure "$BIN_BEFORE" before-
    table "before ($BIN_BEFORE)"
    echo
  fi
  measure "$BIN" ""
  table "after ($BIN)"
} | tee "$OUT/summary.txt"

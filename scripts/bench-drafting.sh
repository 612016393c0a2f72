#!/usr/bin/env bash
# Drafting cost on a >RAM model: what a verify decode of 1+N tokens costs in flash bytes and time
# against a plain decode, and the acceptance a draft must reach to pay (issue #17).
#
# Random weights make acceptance meaningless, but the cost side is real. `--ngram` on a prompt
# that repeats a passage gives real verify decodes: per cache size it runs
#   1. one route-traced run per N (the trace shows every position a verify decode routed, which
#      is how each decode's width 1+drafts is recovered; traced timings are perturbed, bytes are
#      exact), and
#   2. PAIRS adjacent untraced pairs (A,B then B,A) of plain greedy vs `--ngram --draft NMAX`,
#      the model file dropped from the page cache (that file only) before every run.
# scripts/drafting_report.py then prints, per run, the cost of each decode width against the
# width-1 decodes of the same run, the break-even acceptance, and the pairs' s/token ratios.
#
# usage: scripts/bench-drafting.sh MODEL OUT_DIR
# env: CACHES (default "1024 4096"), DRAFTS (default "1 2 4"), NMAX (default: last of DRAFTS),
#      PAIRS (default 3), N tokens (default 16), THREADS (default 2), BIN (default release build),
#      PROMPT (default: a passage said three times)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

MODEL="${1:?usage: scripts/bench-drafting.sh MODEL OUT_DIR}"
OUT="${2:?usage: scripts/bench-drafting.sh MODEL OUT_DIR}"
CACHES="${CACHES:-1024 4096}"
DRAFTS="${DRAFTS:-1 2 4}"
NMAX="${NMAX:-${DRAFTS##* }}"
PAIRS="${PAIRS:-3}"
N="${N:-16}"
THREADS="${THREADS:-2}"
PROMPT="${PROMPT:-one two three four five. one two three four five. one two three four five.}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

say() { printf 'bench-drafting: %s\n' "$*" >&2; }
die() { printf 'error: %s\nhint: %s\n' "$1" "$2" >&2; exit 1; }
[ -f "$MODEL" ] || die "model not found: $MODEL" "bmoe-bench model synth --preset qwen3-30b-a3b --router-skew 0.65 -o $MODEL"
case "$PAIRS" in '' | *[!0-9]*) die "PAIRS='$PAIRS' is not a whole number" "PAIRS=3" ;; esac
if [ -z "${BIN:-}" ]; then
  say "building release bmoe-cli"
  cargo build --release -p bmoe-engine --bin bmoe-cli >&2
  BIN="$CARGO_TARGET_DIR/release/bmoe-cli"
fi

mkdir -p "$OUT/raw"
{
  echo "date_utc=$(date -u +%FT%TZ) loadavg=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "model=$MODEL bytes=$(stat -c %s "$MODEL")"
  echo "bin=$BIN engine=$("$BIN" --version | awk '{print $NF}') threads=$THREADS n=$N pairs=$PAIRS"
  echo "caches='$CACHES' drafts='$DRAFTS' nmax=$NMAX prompt='$PROMPT'"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) nproc=$(nproc)"
} > "$OUT/raw/env.txt"

uncache_model() { dd if="$MODEL" iflag=nocache count=0 status=none 2>/dev/null || say "could not drop the model from the page cache"; }

run() { # name, then extra flags
  local name="$1" status=0; shift
  uncache_model
  say "run $name"
  echo "loadavg_before=$(cut -d' ' -f1-3 /proc/loadavg)" > "$OUT/raw/$name.env"
  "$BIN" -m "$MODEL" -p "$PROMPT" -n "$N" -t "$THREADS" -c 512 --moe-stream --overlap \
    --csv "$OUT/raw/$name.csv" "$@" > "$OUT/raw/$name.out" 2> "$OUT/raw/$name.err" || status=$?
  echo "exit=$status loadavg_after=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/raw/$name.env"
  [ "$status" = 0 ] || say "run $name FAILED (exit $status; see $OUT/raw/$name.err)"
}

for c in $CACHES; do
  for d in $DRAFTS; do
    run "c$c-traced-d$d" --cache-mb "$c" --ngram --draft "$d" --ngram-min-match 1 \
      --route-trace "$OUT/raw/c$c-traced-d$d.route.csv"
  done
  for pair in $(seq 1 "$PAIRS"); do
    if [ $((pair % 2)) = 1 ]; then order="a b"; else order="b a"; fi
    for v in $order; do
      if [ "$v" = a ]; then
        run "c$c-a-p$pair" --cache-mb "$c"
      else
        run "c$c-b-p$pair" --cache-mb "$c" --ngram --draft "$NMAX" --ngram-min-match 1
      fi
    done
  done
done

python3 scripts/drafting_report.py "$OUT" | tee "$OUT/report.txt"

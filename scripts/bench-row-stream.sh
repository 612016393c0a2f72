#!/usr/bin/env bash
# --row-stream benchmark: the token embedding's resident MiB saved against what fetching its
# rows costs (reads, MiB, s/token), on a model with a real vocabulary.
#
# usage: scripts/bench-row-stream.sh [OUT_DIR]
#   OUT_DIR  default bench-data/$(date +%F)-memory
# env: VOCAB (default 151936, Qwen3's), EMBD (default 2048), MODEL_DIR (where the synthetic model
#      is written; default ${BMOE_MODELS:-$HOME/.cache/bmoe}; must not be tmpfs: O_DIRECT), BIN
#      (bmoe-cli; default the debug build in $CARGO_TARGET_DIR, llama.cpp is -O3 there), N
#      (tokens per run, default 32), THREADS (default 2), FEED_SEED (default 42: pseudo-random
#      tokens, so the rows gathered spread over the vocabulary as real text does), BUDGETS (row
#      cache MiB per run, default "0 1 16 1024")
# The model: the tiny preset's layers (2 layers, 8 experts) with VOCAB x EMBD F32 embedding and
# output tables (2 x 1.2 GB at the defaults). Each run streams the experts (--moe-stream
# --cache-mb 0); the baseline keeps the embedding resident, the others add --row-stream.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

OUT="${1:-bench-data/$(date -u +%F)-memory}"
VOCAB="${VOCAB:-151936}"
EMBD="${EMBD:-2048}"
MODEL_DIR="${MODEL_DIR:-${BMOE_MODELS:-$HOME/.cache/bmoe}}"
N="${N:-32}"
THREADS="${THREADS:-2}"
FEED_SEED="${FEED_SEED:-42}"
BUDGETS="${BUDGETS:-0 1 16 1024}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

say() { printf 'bench-row-stream: %s\n' "$*" >&2; }
die() { printf 'error: %s\nhint: %s\n' "$1" "$2" >&2; exit 1; }
case "$VOCAB$EMBD$N" in *[!0-9]*) die "VOCAB, EMBD and N must be whole numbers" "e.g. VOCAB=151936 EMBD=2048 N=32" ;; esac
if [ -z "${BIN:-}" ]; then
  cargo build -p bmoe-engine --bin bmoe-cli -p bmoe-bench --bin bmoe-bench >&2
  BIN="$CARGO_TARGET_DIR/debug/bmoe-cli"
fi
BENCH="${BENCH:-$(dirname "$BIN")/bmoe-bench}"
[ -x "$BIN" ] || die "bmoe-cli not found: $BIN" "build it: cargo build -p bmoe-engine --bin bmoe-cli"
[ -x "$BENCH" ] || die "bmoe-bench not found: $BENCH" "build it: cargo build -p bmoe-bench"
mkdir -p "$OUT" "$MODEL_DIR"
MODEL="$MODEL_DIR/row-stream-v${VOCAB}-e${EMBD}.gguf"
if [ ! -f "$MODEL" ]; then
  say "writing $MODEL"
  "$BENCH" model synth --preset tiny --vocab "$VOCAB" --embd "$EMBD" -o "$MODEL" >&2
fi

# the last trailer's value of key $2 in CSV $1
key() { awk -v k="$2" '/^# summary/ { for (i = 3; i <= NF; i++) { j = index($i, "="); if (substr($i, 1, j - 1) == k) v = substr($i, j + 1) } } END { print v }' "$1"; }
# the last token row's value of column $2 (by header name) in CSV $1: measured by the process,
# independent of the row cache's own accounting
col() { awk -F, -v k="$2" '/^#/ { next } !h { for (i = 1; i <= NF; i++) if ($i == k) c = i; h = 1; next } { v = $c } END { print v }' "$1"; }

TABLE="$OUT/row-stream.md"
{
  echo "# --row-stream: ${VOCAB} x ${EMBD} F32 embedding ($(du -m "$MODEL" | cut -f1) MiB model)"
  echo
  echo "Input: --feed-random $FEED_SEED, $N tokens, $THREADS threads, experts streamed (--cache-mb 0)."
  echo
  echo "| run | s/tok | RSS MiB | table MiB | resident MiB | saved MiB | rows | reads | read MiB | read MiB/tok | evictions |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
} >"$TABLE"

run() { # name, extra flags...
  local name="$1"
  shift
  local csv="$OUT/$name.csv"
  say "run $name: $*"
  "$BIN" -m "$MODEL" -p "The capital of Japan is" -n "$N" -t "$THREADS" -c 512 \
    --ignore-eos --feed-random "$FEED_SEED" --moe-stream --cache-mb 0 --csv "$csv" "$@" \
    >"$OUT/$name.out" 2>"$OUT/$name.err" || die "run $name failed (see $OUT/$name.err)" "check the model and the flags"
  local t r saved
  t="$(key "$csv" row_table_MiB)"
  r="$(key "$csv" row_resident_MiB)"
  saved="$(awk -v t="$t" -v r="$r" 'BEGIN { printf "%.1f", (t > 0 ? t - r : 0) }')"
  local read
  read="$(key "$csv" row_read_MiB)"
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$(key "$csv" s/tok)" "$(col "$csv" rss_mib)" "$t" "$r" "$saved" \
    "$(key "$csv" row_rows)" "$(key "$csv" row_reads)" "$read" \
    "$(awk -v x="$read" -v n="$N" 'BEGIN { printf "%.3f", x / n }')" "$(key "$csv" row_evictions)" >>"$TABLE"
}

run resident
for b in $BUDGETS; do
  run "rows-cache-$b" --row-stream --row-cache-mb "$b"
done
say "table: $TABLE"
cat "$TABLE"

#!/usr/bin/env bash
# What a speculative verify decode costs on a streamed model: for each cache size and each draft
# width N, a `--ngram --draft N` run on a prompt that repeats one passage (so prompt lookup drafts
# at nearly every step even with random weights, and every such decode verifies 1 + N tokens)
# against a plain run of the same prompt. The model file is dropped from the page cache (that
# file only) before every run. Per configuration the report gives the verify decode's flash bytes
# and wall time, the same for N plain decodes, and the per-draft acceptance a draft source must
# reach for the verify decode to pay (scripts/drafting_report.py).
#
# usage: scripts/bench-drafting.sh MODEL [OUT_DIR]
#   OUT_DIR default bench-data/$(date -u +%F)-drafting
# env: CACHES ("1024 4096", MiB), DRAFTS ("1 2 4"), N tokens per run (32), THREADS (2),
#      REPEATS runs per configuration (2), BIN (default: release build), EXTRA (more bmoe-cli
#      flags for every run, e.g. --overlap)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

MODEL="${1:?usage: scripts/bench-drafting.sh MODEL [OUT_DIR]}"
OUT="${2:-bench-data/$(date -u +%F)-drafting}"
CACHES="${CACHES:-1024 4096}"
DRAFTS="${DRAFTS:-1 2 4}"
N="${N:-32}"
THREADS="${THREADS:-2}"
REPEATS="${REPEATS:-2}"
EXTRA="${EXTRA:-}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

say() { printf 'bench-drafting: %s\n' "$*" >&2; }
die() { printf 'error: %s\nhint: %s\n' "$1" "$2" >&2; exit 1; }
[ -f "$MODEL" ] || die "model not found: $MODEL" "bmoe-bench model synth --preset qwen3-30b-a3b --router-skew 0.65 -o $MODEL"
if [ -z "${BIN:-}" ]; then
  cargo build --release -p bmoe-engine --bin bmoe-cli >&2
  BIN="$CARGO_TARGET_DIR/release/bmoe-cli"
fi
mkdir -p "$OUT/raw"

# one passage, repeated: the n-gram source finds its continuation from the second copy on
PASSAGE="The river runs past the mill and the mill wheel turns. "
PROMPT=""
for _ in 1 2 3 4 5 6; do PROMPT="$PROMPT$PASSAGE"; done

uncache_model() { dd if="$MODEL" iflag=nocache count=0 status=none 2>/dev/null || say "could not drop the model from the page cache"; }

one() { # label flags…
  local label="$1"; shift
  uncache_model
  say "$label"
  # shellcheck disable=SC2086 # EXTRA is a flag list
  "$BIN" -m "$MODEL" -p "$PROMPT" -n "$N" -t "$THREADS" -c 1024 --ignore-eos --moe-stream \
    "$@" $EXTRA --csv "$OUT/raw/$label.csv" > "$OUT/raw/$label.out" 2> "$OUT/raw/$label.err" \
    || die "run $label failed (see $OUT/raw/$label.err)" "check the model and the flags in $OUT/raw/$label.err"
}

for r in $(seq 1 "$REPEATS"); do
  for c in $CACHES; do
    one "c$c-plain-r$r" --cache-mb "$c"
    for d in $DRAFTS; do
      one "c$c-ngram$d-r$r" --cache-mb "$c" --ngram --draft "$d" --ngram-min-match 1
    done
  done
done
python3 scripts/drafting_report.py "$OUT" | tee "$OUT/report.txt"

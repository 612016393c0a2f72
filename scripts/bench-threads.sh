#!/usr/bin/env bash
# Compute threads against a busy machine: bmoe-cli's token time at each -t in THREADS, with the
# machine otherwise idle and with BUSY busy-loop processes competing for the cores, plain mmap and
# --moe-stream, as ratios measured in one run (configurations interleaved within each repetition).
#
# Why: ggml's threadpool meets at a barrier after every graph split, and the routing hook splits
# the graph at every MoE layer. A thread that the scheduler has taken off its core holds the
# others at that barrier, so on a phone or laptop with other work running, -t equal to the core
# count can cost far more than the share of CPU it loses. This script measures how much.
#
# Usage: scripts/bench-threads.sh [MODEL] [OUT_DIR]
#   MODEL    a GGUF file; default: bmoe-cli's built-in tiny model (no -m)
#   OUT_DIR  raw files (default: a temp dir); a summary goes to stdout
# Env: N=64 tokens per run, REPS=3, THREADS="1 2", BUSY=1 competing processes, WARMUP=1 (an
#      untimed run of each mode first: the model's pages into the page cache),
#      ADAPTIVE=1 (also a run with --adaptive-threads at the largest -t, listed as "a<max>"),
#      CACHE_MB (streamed cache; default 2 for the tiny model, 4096 otherwise), PROMPT,
#      BIN (default: a release build of bmoe-cli in the workspace's target dir).
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${1:-}
OUT=${2:-$(mktemp -d)}
N=${N:-64}
REPS=${REPS:-3}
THREADS=${THREADS:-"1 2"}
BUSY=${BUSY:-1}
PROMPT=${PROMPT:-"The quick brown fox"}
if [ -n "$MODEL" ]; then CACHE_MB=${CACHE_MB:-4096}; else CACHE_MB=${CACHE_MB:-2}; fi
mkdir -p "$OUT/raw"

if [ -z "${BIN:-}" ]; then
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
  cargo build --release --locked -q -p bmoe-engine --bin bmoe-cli
  BIN=$CARGO_TARGET_DIR/release/bmoe-cli
fi
if [ -n "$MODEL" ] && [ ! -f "$MODEL" ]; then
  echo "error: model file $MODEL does not exist" >&2
  echo "hint: make one with \`bmoe-bench model synth --preset qwen3-30b-a3b -o $MODEL\`, or omit it to use the built-in tiny model" >&2
  exit 1
fi
model_args=()
[ -n "$MODEL" ] && model_args=(-m "$MODEL")

busy_pids=()
stop_busy() {
  for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${busy_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  busy_pids=()
}
trap stop_busy EXIT
start_busy() {
  local i
  for ((i = 0; i < $1; i++)); do
    ( while :; do :; done ) &
    busy_pids+=("$!")
  done
}

# Median and mean of the wall_ms column of a metrics CSV (found by name; comment lines skipped).
wall_stats() {
  python3 - "$1" <<'PY'
import csv, statistics, sys
rows = [l for l in open(sys.argv[1]) if not l.startswith("#")]
walls = [float(r["wall_ms"]) for r in csv.DictReader(rows)]
print(f"{statistics.median(walls):.3f} {statistics.fmean(walls):.3f}" if walls else "nan nan")
PY
}

if [ "${WARMUP:-1}" = 1 ]; then
  "$BIN" "${model_args[@]}" -p "$PROMPT" -n 4 --ignore-eos > /dev/null 2> "$OUT/raw/warmup-plain.stderr"
  "$BIN" "${model_args[@]}" --moe-stream --cache-mb "$CACHE_MB" -p "$PROMPT" -n 4 --ignore-eos \
    > /dev/null 2> "$OUT/raw/warmup-stream.stderr"
fi

printf 'rep\tbusy\tmode\tthreads\tp50_ms\tmean_ms\n' > "$OUT/results.tsv"
echo "bench-threads: $("$BIN" --version) model=${MODEL:-built-in tiny} N=$N REPS=$REPS THREADS=\"$THREADS\" BUSY=$BUSY cache=${CACHE_MB} MiB nproc=$(nproc)" >&2
for rep in $(seq "$REPS"); do
  for busy in 0 "$BUSY"; do
    [ "$busy" -gt 0 ] && start_busy "$busy"
    for mode in plain stream; do
      mode_args=()
      [ "$mode" = stream ] && mode_args=(--moe-stream --cache-mb "$CACHE_MB")
      max_t=$(printf '%s\n' $THREADS | sort -n | tail -1)
      variants=$THREADS
      [ "${ADAPTIVE:-1}" = 1 ] && [ "$max_t" -gt 1 ] && variants="$THREADS a$max_t"
      for t in $variants; do
        tag="r$rep-busy$busy-$mode-t$t"
        t_args=(-t "$t")
        [ "${t#a}" != "$t" ] && t_args=(-t "${t#a}" --adaptive-threads)
        "$BIN" "${model_args[@]}" "${mode_args[@]}" "${t_args[@]}" -p "$PROMPT" -n "$N" \
          --ignore-eos --feed-random 7 --csv "$OUT/raw/$tag.csv" \
          > "$OUT/raw/$tag.stdout" 2> "$OUT/raw/$tag.stderr"
        read -r p50 mean < <(wall_stats "$OUT/raw/$tag.csv")
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$busy" "$mode" "$t" "$p50" "$mean" >> "$OUT/results.tsv"
        echo "  $tag: p50 $p50 ms, mean $mean ms/token $(grep -o 'adaptive threads: .*' "$OUT/raw/$tag.stderr" || true)" >&2
      done
    done
    stop_busy
  done
done

# Summary: per configuration the median over repetitions of the mean token time, and ratios to
# the idle run of the same mode and thread count (what the competing process costs) and to -t 1
# under the same load (what the extra threads buy).
python3 - "$OUT/results.tsv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = {}
for key in {(r["busy"], r["mode"], r["threads"]) for r in rows}:
    vals = [float(r["mean_ms"]) for r in rows if (r["busy"], r["mode"], r["threads"]) == key]
    med[key] = statistics.median(vals)
# fixed counts in order, then the adaptive runs ("a<max>")
threads = sorted({r["threads"] for r in rows}, key=lambda t: (t.startswith("a"), int(t.lstrip("a"))))
print("| busy | mode | -t | mean ms/token (median of reps) | vs idle, same -t | vs -t %s, same load |" % threads[0])
print("|---:|---|---:|---:|---:|---:|")
for busy in sorted({k[0] for k in med}, key=int):
    for mode in ("plain", "stream"):
        for t in threads:
            v = med[(busy, mode, t)]
            idle = med[("0", mode, t)]
            one = med[(busy, mode, threads[0])]
            print(f"| {busy} | {mode} | {t} | {v:.3f} | {v / idle:.2f}x | {v / one:.2f}x |")
PY
echo "raw files: $OUT" >&2

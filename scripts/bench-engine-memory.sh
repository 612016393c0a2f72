#!/usr/bin/env bash
# Memory-policy benchmark: under a memory cgroup smaller than the model, compare
# --dense-weights mmap vs anon at a fixed cache, and --cache-mb auto; report tok/s, major
# faults/token and dense_resident_frac from each run's own metrics CSV (the "why").
#
# usage: scripts/bench-engine-memory.sh [MODEL] [OUT_DIR]
#   MODEL    default $BMOE_MODELS/qwen3-30b-a3b.gguf ($BMOE_MODELS defaults to ~/.cache/bmoe; bmoe-gguf preset qwen3-30b-a3b)
#   OUT_DIR  default bench-data/$(date +%F)-engine-memory
# env: BIN (bmoe-cli to use; default: the debug build in $CARGO_TARGET_DIR, llama.cpp is -O3
#      there), N (tokens per run, default 16), THREADS (default 2), LIMIT_GIB (default 8),
#      CACHE_MB (fixed cache for the mmap/anon pair, default 2048), FEED_SEED (default 42),
#      RUNS (subset to (re)run, default "dense-mmap dense-anon auto-anon"; the table covers all)
# Needs root for the memory cgroup (v1 /sys/fs/cgroup/memory or v2 /sys/fs/cgroup). The page
# cache is NOT dropped system-wide (other work shares this machine): each run starts from
# whatever the previous one left, and the order (mmap, anon, auto) is printed with the results.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL="${1:-${BMOE_MODELS:-$HOME/.cache/bmoe}/qwen3-30b-a3b.gguf}"
OUT="${2:-bench-data/$(date -u +%F)-engine-memory}"
N="${N:-16}"
THREADS="${THREADS:-2}"
LIMIT_GIB="${LIMIT_GIB:-8}"
CACHE_MB="${CACHE_MB:-2048}"
FEED_SEED="${FEED_SEED:-42}"
RUNS="${RUNS:-dense-mmap dense-anon auto-anon}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

say() { printf 'bench-engine-memory: %s\n' "$*" >&2; }
[ -f "$MODEL" ] || { echo "error: model not found: $MODEL" >&2; echo "hint: bmoe-bench model synth --preset qwen3-30b-a3b -o $MODEL" >&2; exit 1; }
if [ -z "${BIN:-}" ]; then
  cargo build -p bmoe-engine --bin bmoe-cli >&2
  BIN="$CARGO_TARGET_DIR/debug/bmoe-cli"
fi

bytes=$((LIMIT_GIB * 1024 * 1024 * 1024))
name="bmoe-bench-memory-$$"
if [ -w /sys/fs/cgroup/memory ]; then
  CG=/sys/fs/cgroup/memory/$name
  mkdir "$CG"
  echo "$bytes" > "$CG/memory.limit_in_bytes"
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && [ -w /sys/fs/cgroup ]; then
  CG=/sys/fs/cgroup/$name
  mkdir "$CG"
  echo "$bytes" > "$CG/memory.max"
else
  echo "error: no writable memory cgroup" >&2
  echo "hint: run as root on a machine with cgroup v1 memory or cgroup v2" >&2
  exit 1
fi
trap 'rmdir "$CG" 2>/dev/null || true' EXIT

mkdir -p "$OUT/raw"
{
  echo "date_utc=$(date -u +%FT%TZ)"
  echo "model=$MODEL bytes=$(stat -c %s "$MODEL")"
  echo "engine=$("$BIN" --version) threads=$THREADS n=$N feed=random:$FEED_SEED limit_gib=$LIMIT_GIB cache_mb=$CACHE_MB"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) nproc=$(nproc)"
  echo "mem_total_kib=$(awk '/MemTotal/{print $2}' /proc/meminfo)"
} >> "$OUT/raw/env.txt"

run() { # label, flags...
  local label="$1"; shift
  say "$label: $*"
  sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" "$BIN" -m "$MODEL" -p "The capital of Japan is" \
    -n "$N" -t "$THREADS" -c 512 --feed-random "$FEED_SEED" --moe-stream --csv "$OUT/raw/$label.csv" "$@" \
    > "$OUT/raw/$label.out" 2> "$OUT/raw/$label.err" || say "$label failed (exit $?; see $OUT/raw/$label.err)"
}

for r in $RUNS; do
  case "$r" in
    dense-mmap) run dense-mmap --cache-mb "$CACHE_MB" --dense-weights mmap ;;
    dense-anon) run dense-anon --cache-mb "$CACHE_MB" --dense-weights anon ;;
    auto-anon) run auto-anon --cache-mb auto --dense-weights anon ;;
    *) echo "error: unknown run '$r'" >&2; echo "hint: RUNS is a subset of: dense-mmap dense-anon auto-anon" >&2; exit 1 ;;
  esac
done

# one line per run from its own CSV: resolved cache, tok/s, majflt/tok, mean dense_resident_frac,
# mean rss_file/rss_anon MiB, read MiB/token
{
  printf '%-11s %8s %8s %10s %10s %9s %9s %10s\n' run cache_mb tok/s majflt/tok dense_res rss_file rss_anon MiB/token
  for label in dense-mmap dense-anon auto-anon; do
    f="$OUT/raw/$label.csv"
    [ -s "$f" ] || { printf '%-11s (no CSV)\n' "$label"; continue; }
    awk -F, -v label="$label" '
      /^# moe_stream=/ { n = split($0, kv, " "); for (i = 1; i <= n; i++) if (kv[i] ~ /^cache_mb=/) { sub("cache_mb=", "", kv[i]); cache = kv[i] } }
      /^# summary/ { n = split($0, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], p, "="); s[p[1]] = p[2] } }
      /^[0-9]/ { rows++; if ($12 >= 0) { fr += $12; frn++ } rf += $18; ra += $17; rb += $6 }
      END {
        printf "%-11s %8s %8s %10s %10.3f %9.1f %9.1f %10.1f\n", label, cache, s["tok/s"], s["majflt/tok"],
          (frn ? fr / frn : -1), (rows ? rf / rows : 0), (rows ? ra / rows : 0), (rows ? rb / rows / 1048576 : 0)
      }' "$f"
  done
} | tee "$OUT/results.txt"
say "raw files in $OUT/raw; summary in $OUT/results.txt"

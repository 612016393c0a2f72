#!/usr/bin/env bash
# Engine benchmark: tok/s of plain llama.cpp mmap vs --moe-stream at a few cache sizes, with and
# without a memory cgroup; O_DIRECT bandwidth at the per-expert read size; resident compute time.
#
# usage: scripts/bench-engine.sh [MODEL] [OUT_DIR]
#   MODEL    default $BMOE_MODELS/qwen3-30b-a3b.gguf ($BMOE_MODELS defaults to ~/.cache/bmoe; bmoe-gguf preset qwen3-30b-a3b)
#   OUT_DIR  default bench-data/$(date +%F)-engine
# env: BIN (a bmoe-cli to use instead of building release), N (tokens per run, default 24), THREADS (default 2), LIMIT_GIB (default 8),
#      CACHES (stream cache sizes in MiB, default "0 2048 4096"), FEED_SEED (default 42)
# Needs root for the memory cgroup (v1 /sys/fs/cgroup/memory or v2 /sys/fs/cgroup) and for
# dropping the page cache between cold runs. Input: seeded pseudo-random tokens (--feed-random),
# never greedy output, so routing is not flattered by repetition (see specs/design.md).
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL="${1:-${BMOE_MODELS:-$HOME/.cache/bmoe}/qwen3-30b-a3b.gguf}"
OUT="${2:-bench-data/$(date -u +%F)-engine}"
N="${N:-24}"
THREADS="${THREADS:-2}"
LIMIT_GIB="${LIMIT_GIB:-8}"
CACHES="${CACHES:-0 2048 4096}"
FEED_SEED="${FEED_SEED:-42}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

say() { printf 'bench-engine: %s\n' "$*" >&2; }
[ -f "$MODEL" ] || { echo "error: model not found: $MODEL" >&2; echo "hint: bmoe-bench model synth --preset qwen3-30b-a3b -o $MODEL" >&2; exit 1; }

if [ -z "${BIN:-}" ]; then
  say "building release bmoe-cli"
  cargo build --release -p bmoe-engine --bin bmoe-cli >&2
  BIN="$CARGO_TARGET_DIR/release/bmoe-cli"
fi
mkdir -p "$OUT/raw"
{
  echo "date_utc=$(date -u +%FT%TZ)"
  echo "model=$MODEL bytes=$(stat -c %s "$MODEL")"
  echo "engine=$("$BIN" --version) threads=$THREADS n=$N feed=random:$FEED_SEED limit_gib=$LIMIT_GIB"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) nproc=$(nproc)"
  echo "mem_total_kib=$(awk '/MemTotal/{print $2}' /proc/meminfo)"
} > "$OUT/raw/env.txt"

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || say "cannot drop caches (not root?)"; }

# --- memory cgroup (v1 or v2) -----------------------------------------------------------------
CG=""
cg_setup() {
  local bytes=$((LIMIT_GIB * 1024 * 1024 * 1024))
  if [ -d /sys/fs/cgroup/memory ] && [ -w /sys/fs/cgroup/memory ]; then
    CG=/sys/fs/cgroup/memory/bmoe-bench
    mkdir -p "$CG"
    echo "$bytes" > "$CG/memory.limit_in_bytes"
    echo "$bytes" > "$CG/memory.memsw.limit_in_bytes" 2>/dev/null || true
  elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    CG=/sys/fs/cgroup/bmoe-bench
    mkdir -p "$CG"
    echo "$bytes" > "$CG/memory.max"
    echo 0 > "$CG/memory.swap.max" 2>/dev/null || true
  else
    say "no writable memory cgroup: skipping limited runs"
  fi
}
in_cg() { sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" "$@"; }
cg_cleanup() { [ -n "$CG" ] && rmdir "$CG" 2>/dev/null || true; }
trap cg_cleanup EXIT

COMMON=(-m "$MODEL" -p "The capital of Japan is" -n "$N" -t "$THREADS" -c 512 --feed-random "$FEED_SEED")

run() { # name, then bmoe-cli flags
  local name="$1"; shift
  say "run $name"
  local t0 t1
  t0=$(date +%s%N)
  "$@" > "$OUT/raw/$name.out" 2> "$OUT/raw/$name.err" || say "run $name FAILED (see $OUT/raw/$name.err)"
  t1=$(date +%s%N)
  echo "process_wall_ms=$(( (t1 - t0) / 1000000 ))" >> "$OUT/raw/$name.err"
}

# 1. resident (no limit): first run pays the page-cache fill (load_s with MAP_POPULATE), the second
#    is warm — its s/token is the resident compute time per token.
drop_caches
run plain-cold "$BIN" "${COMMON[@]}"
run plain-warm "$BIN" "${COMMON[@]}"

# 2. streamed, no limit
for c in $CACHES; do
  drop_caches
  run "stream-c$c" "$BIN" "${COMMON[@]}" --moe-stream --cache-mb "$c"
done
run "stream-c0-io1" "$BIN" "${COMMON[@]}" --moe-stream --cache-mb 0 --io-threads 1

# 3. inside the memory cgroup
cg_setup
if [ -n "$CG" ]; then
  drop_caches
  run cg-plain in_cg "$BIN" "${COMMON[@]}"
  for c in $CACHES; do
    drop_caches
    run "cg-stream-c$c" in_cg "$BIN" "${COMMON[@]}" --moe-stream --cache-mb "$c"
  done
fi

# 4. O_DIRECT bandwidth at the per-expert read size (Q4_K 768x2048 expert slice = 884736 bytes)
say "O_DIRECT bandwidth"
# dev profile: the loop is syscall-bound, and it reuses the llama.cpp build of the tests
cargo bench --profile dev -p bmoe-engine --bench odirect_bw -- "$MODEL" 884736 2000 1,2,4,8 > "$OUT/raw/odirect.txt" 2>/dev/null \
  || say "odirect bench failed"

# --- table -------------------------------------------------------------------------------------
{
  printf '%-18s %10s %10s %12s %10s %s\n' run s/token tok/s read_MiB/tok load_s mode
  for f in "$OUT"/raw/*.out; do
    name=$(basename "$f" .out)
    gen=$(grep -m1 '^generation:' "$f" || true)
    stok=$(echo "$gen" | sed -n 's/.*, \([0-9.]*\) s\/token.*/\1/p')
    tps=$(echo "$gen" | sed -n 's/.*(\([0-9.]*\) tok\/s).*/\1/p')
    rd=$(sed -n 's/^moe-stream: read [0-9.]* MiB (\([0-9.]*\) MiB\/token).*/\1/p' "$f")
    load=$(sed -n 's/.*model load \([0-9.]*\) s.*/\1/p' "$f")
    mode=$(grep -m1 '^mode:' "$f" | cut -c7-40 || true)
    printf '%-18s %10s %10s %12s %10s %s\n' "$name" "${stok:--}" "${tps:--}" "${rd:--}" "${load:--}" "$mode"
  done
  echo
  cat "$OUT/raw/odirect.txt" 2>/dev/null || true
} | tee "$OUT/table.txt"
say "results in $OUT (write findings.md by hand from table.txt)"

#!/usr/bin/env bash
# Benchmarks bmoe-bench itself (not the engine):
#   1. overhead per run: a sweep of N runs whose "engine" only copies a 256-token CSV;
#      overhead = (sweep wall − Σ engine wall) / runs, budget 50 ms;
#   2. `bmoe-bench report` on those N (default 1000) runs, budget 2 s.
# Usage: scripts/bench-sweeps.sh [RUNS]   (release build; CARGO_TARGET_DIR respected)
set -euo pipefail
RUNS=${1:-1000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
cargo build --release -q -p bmoe-bench --manifest-path "$ROOT/Cargo.toml"
BENCH=$TARGET/release/bmoe-bench
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# A v2 metrics CSV with 256 tokens.
{
  echo "# bmoe_metrics v2"; echo "# engine=bench"; echo "# model=tiny.gguf arch=qwen3moe n_layer=2"
  echo "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms"
  awk 'BEGIN { srand(1); for (i = 1; i <= 256; i++) printf "%d,256,%.3f,%.3f,%.3f,%d,%.2f,0.000,0.100\n", i, 100 + 20 * rand(), 10 + 5 * rand(), 80, 1048576, 50 }'
  echo "# summary tokens=256 cache_hit_pct=50.0"
} > "$WORK/template.csv"
cat > "$WORK/copy-engine" <<SH
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in --csv) exec cp "$WORK/template.csv" "\$2";; esac; shift; done
SH
chmod +x "$WORK/copy-engine"
: > "$WORK/model.gguf"
CELLS=$(( RUNS / 10 ))
VALUES=$(seq -s, 1 "$CELLS")
cat > "$WORK/bench.toml" <<TOML
name = "bench"
binary = "$WORK/copy-engine"
[[model]]
id = "m"
path = "$WORK/model.gguf"
[axes.x]
flag = "--x"
[[sweep]]
name = "s"
axes = { x = [$VALUES] }
repetitions = 10
order = { mode = "interleaved" }
TOML

load0=$(cut -d' ' -f1 /proc/loadavg)
t0=$(date +%s.%N)
"$BENCH" sweep "$WORK/bench.toml" -o "$WORK/res" 2>/dev/null
t1=$(date +%s.%N)
engine=$(grep -o '"duration_s":[0-9.e+-]*' "$WORK/res/results.jsonl" | cut -d: -f2 | awk '{ s += $1 } END { printf "%.6f", s }')
n=$(wc -l < "$WORK/res/results.jsonl")
awk -v t0="$t0" -v t1="$t1" -v e="$engine" -v n="$n" -v load="$load0" 'BEGIN {
  o = (t1 - t0 - e) / n * 1000
  printf "sweep: %d runs in %.2f s, engine processes %.2f s -> overhead %.1f ms/run (budget 50 ms: %.2fx of budget; load average %s)\n", n, t1 - t0, e, o, o / 50, load }'

load=$(cut -d' ' -f1 /proc/loadavg)
t0=$(date +%s.%N)
TIMEFORMAT='%U %S'
cpu=$( { time "$BENCH" report "$WORK/res" > "$WORK/report.md"; } 2>&1 | awk '{ print $1 + $2 }')
t1=$(date +%s.%N)
awk -v t0="$t0" -v t1="$t1" -v n="$n" -v cpu="$cpu" -v load="$load" 'BEGIN {
  printf "report: %d runs (256 tokens each) in %.3f s wall, %.3f s CPU (budget 2 s: %.2fx of budget by wall; load average %s)\n", n, t1 - t0, cpu, (t1 - t0) / 2, load }'

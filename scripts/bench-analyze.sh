#!/usr/bin/env bash
# Benchmark bmoe-analyze against the reference Python timings (shared/reference-outputs/TIMINGS.md).
#
#   scripts/bench-analyze.sh [OUT_DIR]      (default bench-data/<today>-analyze)
#   BMOE_BENCH_ONLY=convert scripts/bench-analyze.sh [OUT_DIR]   (only the convert table)
#
# Generates the deterministic synthetic route traces with shared/tools/gen_route_trace.py into a
# scratch dir (never committed), runs each command under /usr/bin/time -v, keeps the raw output
# in OUT_DIR/raw/ and prints a table (wall, user CPU, max RSS, ratio to the reference wall time).
# The machine is shared: the load average is recorded next to every run; compare user CPU when
# the load is high.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SHARED="${BMOE_SHARED:-$ROOT/../shared}"
OUT="${1:-$ROOT/bench-data/$(date -u +%Y-%m-%d)-analyze}"
SCRATCH="${BMOE_SCRATCH:-/tmp/bmoe-bench-analyze}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

[ -d "$SHARED/realdata" ] || { echo "error: $SHARED/realdata not found" >&2; echo "hint: set BMOE_SHARED" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "error: /usr/bin/time missing" >&2; echo "hint: apt-get install time" >&2; exit 1; }

cargo build --release --manifest-path "$ROOT/Cargo.toml" -p bmoe-analyze >&2
BIN="$CARGO_TARGET_DIR/release/bmoe-analyze"
mkdir -p "$OUT/raw" "$SCRATCH"

BIG="$SCRATCH/big.route.csv"
MID="$SCRATCH/mid.route.csv"
[ -s "$BIG" ] || python3 "$SHARED/tools/gen_route_trace.py" "$BIG" >&2
[ -s "$MID" ] || python3 "$SHARED/tools/gen_route_trace.py" "$MID" --steps 1300 >&2
QWEN="$SHARED/realdata/2026-07-15-route-trace/qwen.route.csv"

# name | reference wall seconds (TIMINGS.md, "-" = none) | command...
runs=(
  "route-default-5M|54.44|route $BIG"
  "route-sanity-5M|14.26|route $BIG --view sanity"
  "route-matrix-5M|14.77|route $BIG --view matrix"
  "route-phase-all-view-all-5M|59.94|route $BIG --phase all --view all"
  "drop-5M|39.81|drop $BIG"
  "replay-lru-4000-5M|249.84|replay $BIG --budgets 4000 --policies lru"
  "replay-belady-4000-5M|-|replay $BIG --budgets 4000 --policies belady"
  "replay-default-5M|-|replay $BIG"
  "route-default-0.5M|3.55|route $MID"
  "replay-belady-4000-0.5M|49.46|replay $MID --budgets 4000 --policies belady"
  "replay-lru-4000-0.5M|27.04|replay $MID --budgets 4000 --policies lru"
  "replay-default-0.5M|975+|replay $MID"
  "route-default-qwen|0.39|route $QWEN"
  "replay-default-qwen|78.42|replay $QWEN"
  "replay-belady-qwen|-|replay $QWEN --policies belady"
  "replay-lru-qwen|-|replay $QWEN --policies lru"
  "drop-qwen|0.45|drop $QWEN"
)

# Seconds of wall time from a /usr/bin/time -v report.
wall_of() {
  awk -F': ' '/Elapsed \(wall clock\)/{print $2}' "$1" | awk -F: '{ if (NF==3) print $1*3600+$2*60+$3; else print $1*60+$2 }'
}

# BMOE_BENCH_ONLY=convert skips this table (and leaves an existing raw/table.md alone).
if [ "${BMOE_BENCH_ONLY:-}" != convert ]; then
printf '| run | wall s | user s | max RSS MiB | load avg | ref wall s | speed-up (wall) |\n|---|---:|---:|---:|---:|---:|---:|\n'
for r in "${runs[@]}"; do
  IFS='|' read -r name ref cmd <<<"$r"
  load=$(cut -d' ' -f1 /proc/loadavg)
  # shellcheck disable=SC2086
  /usr/bin/time -v "$BIN" $cmd >"$OUT/raw/$name.stdout.txt" 2>"$OUT/raw/$name.time.txt" || true
  wall=$(wall_of "$OUT/raw/$name.time.txt")
  user=$(awk -F': ' '/User time/{print $2}' "$OUT/raw/$name.time.txt")
  rss=$(awk -F': ' '/Maximum resident/{printf "%.1f", $2/1024}' "$OUT/raw/$name.time.txt")
  ratio="-"
  case "$ref" in
    -) ;;
    *+) ratio=$(awk -v r="${ref%+}" -v w="$wall" 'BEGIN{printf ">%.1fx", r/(w>0?w:0.001)}') ;;
    *) ratio=$(awk -v r="$ref" -v w="$wall" 'BEGIN{printf "%.1fx", r/(w>0?w:0.001)}') ;;
  esac
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$wall" "$user" "$rss" "$load" "$ref" "$ratio"
done | tee "$OUT/raw/table.md"
fi

# `convert`: streaming a route trace into Parquet / Arrow IPC. rows/s is data rows over wall
# time; out/CSV is the output size over the input size. The output goes to the scratch dir.
convert_runs=(
  "convert-parquet-5M|$BIG|parquet"
  "convert-arrow-5M|$BIG|arrow"
  "convert-parquet-qwen|$QWEN|parquet"
  "convert-arrow-qwen|$QWEN|arrow"
)
{
printf '| convert | rows | wall s | user s | max RSS MiB | rows/s (wall) | out MiB | out/CSV | load avg |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n'
for r in "${convert_runs[@]}"; do
  IFS='|' read -r name input fmt <<<"$r"
  load=$(cut -d' ' -f1 /proc/loadavg)
  dest="$SCRATCH/$name.$fmt"
  /usr/bin/time -v "$BIN" convert "$input" --to "$fmt" -o "$dest" >"$OUT/raw/$name.stdout.txt" 2>"$OUT/raw/$name.time.txt" || true
  wall=$(wall_of "$OUT/raw/$name.time.txt")
  user=$(awk -F': ' '/User time/{print $2}' "$OUT/raw/$name.time.txt")
  rss=$(awk -F': ' '/Maximum resident/{printf "%.1f", $2/1024}' "$OUT/raw/$name.time.txt")
  rows=$(sed -n 's/.*, \([0-9]*\) rows,.*/\1/p' "$OUT/raw/$name.stdout.txt")
  in_b=$(stat -c %s "$input")
  out_b=$(stat -c %s "$dest" 2>/dev/null || echo 0)
  awk -v n="$name" -v rows="${rows:-0}" -v w="$wall" -v u="$user" -v rss="$rss" -v ib="$in_b" -v ob="$out_b" -v l="$load" \
    'BEGIN{printf "| %s | %d | %s | %s | %s | %.0f | %.1f | %.2f | %s |\n", n, rows, w, u, rss, rows/(w>0?w:0.001), ob/1048576, ob/ib, l}'
done
} | tee "$OUT/raw/convert-table.md"

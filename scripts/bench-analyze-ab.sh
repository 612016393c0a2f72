#!/usr/bin/env bash
# A/B two bmoe-analyze binaries on the same inputs, runs interleaved (A, B, A, B, …) so both see
# the same machine load; prints one line per run and the median ratios B/A per command.
#
#   scripts/bench-analyze-ab.sh A_BIN B_BIN [REPS]      (default 5 reps)
#
# Inputs: the 5 M-row synthetic route trace of scripts/bench-analyze.sh (generated into
# $BMOE_SCRATCH, default /tmp/bmoe-bench-analyze, when missing) and the real qwen trace.
# Both binaries' stdout must be identical, or the comparison is refused.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SHARED="${BMOE_SHARED:-$ROOT/../shared}"
SCRATCH="${BMOE_SCRATCH:-/tmp/bmoe-bench-analyze}"
A="${1:?usage: $0 A_BIN B_BIN [REPS]}"
B="${2:?usage: $0 A_BIN B_BIN [REPS]}"
REPS="${3:-5}"

[ -x /usr/bin/time ] || { echo "error: /usr/bin/time missing" >&2; echo "hint: apt-get install time" >&2; exit 1; }
BIG="$SCRATCH/big.route.csv"
QWEN="$SHARED/realdata/2026-07-15-route-trace/qwen.route.csv"
mkdir -p "$SCRATCH"
[ -s "$BIG" ] || python3 "$SHARED/tools/gen_route_trace.py" "$BIG" >&2
[ -s "$QWEN" ] || { echo "error: $QWEN not found" >&2; echo "hint: set BMOE_SHARED" >&2; exit 1; }

cmds=(
  "route $BIG"
  "route $BIG --phase all --view all"
  "drop $BIG"
  "replay $BIG --budgets 4000 --policies lru"
  "replay $QWEN"
)

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg); A=$A B=$B; $REPS interleaved reps"
printf '%-48s %s %6s %6s %8s\n' command bin wall_s user_s rss_MiB
for c in "${cmds[@]}"; do
  short="${c//$SCRATCH\//}"
  short="${short//$SHARED\//}"
  for rep in $(seq "$REPS"); do
    for side in A B; do
      bin=$A
      [ "$side" = B ] && bin=$B
      # shellcheck disable=SC2086
      /usr/bin/time -f '%e %U %M' -o "$out/time" "$bin" $c >"$out/$side.stdout" 2>/dev/null || true
      read -r wall user rss <"$out/time"
      printf '%-48s %s %6s %6s %8.1f\n' "$short" "$side" "$wall" "$user" "$(echo "$rss/1024" | bc -l)"
      echo "$short|$side|$wall|$user|$rss" >>"$out/all"
    done
    cmp -s "$out/A.stdout" "$out/B.stdout" || { echo "error: stdout differs for: $c" >&2; echo "hint: the binaries do not compute the same thing; diff their outputs" >&2; exit 1; }
  done
done
echo
echo "# medians over $REPS reps; ratio = B / A"
printf '%-48s %8s %8s %8s %8s %8s %8s\n' command A_wall B_wall wall_B/A A_rss_MiB B_rss_MiB rss_B/A
python3 - "$out/all" <<'EOF'
import statistics, sys
rows = [l.strip().split('|') for l in open(sys.argv[1]) if l.strip()]
order = list(dict.fromkeys(r[0] for r in rows))
for c in order:
    med = {s: [statistics.median(float(r[k]) for r in rows if r[0] == c and r[1] == s) for k in (2, 4)] for s in 'AB'}
    (aw, ar), (bw, br) = med['A'], med['B']
    print(f"{c:<48} {aw:8.2f} {bw:8.2f} {bw / aw:8.3f} {ar / 1024:8.1f} {br / 1024:8.1f} {br / ar:8.3f}")
EOF

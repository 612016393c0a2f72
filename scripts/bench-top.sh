#!/usr/bin/env bash
# Benchmarks bmoe-top in a real terminal (tmux):
#   1. CPU of bmoe-top while it is fed 20 tok/s of protocol lines for DURATION s (default 60),
#      from /proc/<pid>/stat (utime+stime), as a ratio to one core.
#   2. The same with nothing arriving (idle floor).
#   3. Start-up of `--replay` on a 100k-row metrics CSV: launch to the first frame showing the
#      run, polled with tmux capture-pane every 10 ms.
# Inputs are generated with the bmoe-telemetry writers (tui/examples/bench_data.rs).
# Usage: scripts/bench-top.sh [OUT_DIR]   (env: DURATION=60 RATE=20 ROWS=100000)
# Prints a summary on stdout and writes raw figures to OUT_DIR (default: a temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-60}
RATE=${RATE:-20}
ROWS=${ROWS:-100000}
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
command -v tmux >/dev/null || { echo "error: tmux not found" >&2; echo "hint: scripts/install-deps.sh installs it" >&2; exit 1; }
command -v python3 >/dev/null || { echo "error: python3 not found (paces the feed)" >&2; exit 1; }

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p bmoe-top --bin bmoe-top --example bench_data
BIN=$CARGO_TARGET_DIR/release/bmoe-top
GEN=$CARGO_TARGET_DIR/release/examples/bench_data
WORK=$(mktemp -d)
SOCK=bmoe-top-bench-$$
cleanup() {
  local sock_path; sock_path=$(tmux -L "$SOCK" display-message -p '#{socket_path}' 2>/dev/null || true)
  tmux -L "$SOCK" kill-server 2>/dev/null || true
  [ -n "$sock_path" ] && rm -f "$sock_path"
  rm -rf "$WORK"
}
trap cleanup EXIT

TOKENS=$(( DURATION * RATE + RATE * 5 ))
"$GEN" protocol "$TOKENS" "$WORK/lines.txt"
"$GEN" csv "$ROWS" "$WORK/big.csv"

# Paces 2 lines per token (BMOE_LOAD + BMOE_PROGRESS) at RATE tokens/s, on absolute deadlines.
cat > "$WORK/pace.py" <<'PY'
import sys, time
rate = float(sys.argv[2]); lines = open(sys.argv[1]).read().splitlines()
t0 = time.monotonic(); tok = 0
for i in range(0, len(lines), 2):
    due = t0 + tok / rate
    d = due - time.monotonic()
    if d > 0: time.sleep(d)
    sys.stdout.write(lines[i] + "\n" + lines[i + 1] + "\n"); sys.stdout.flush(); tok += 1
time.sleep(3600)
PY

CLK=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
find_pid() { # bmoe-top under the pane's shell
  local pane; pane=$(tmux -L "$SOCK" list-panes -t "$1" -F '#{pane_pid}')
  for _ in $(seq 100); do
    local p; p=$(pgrep -P "$pane" -x bmoe-top || true)
    [ -n "$p" ] && { echo "$p"; return; }
    sleep 0.05
  done
  echo "error: bmoe-top did not start in tmux session $1" >&2; exit 1
}
measure() { # session seconds -> cpu ratio
  local pid; pid=$(find_pid "$1")
  sleep 2 # warm-up: first frames, sparkline fill
  local a b w0 w1; a=$(ticks "$pid"); w0=$(date +%s.%N)
  sleep "$2"
  b=$(ticks "$pid"); w1=$(date +%s.%N)
  python3 -c "print(f'{($b-$a)/$CLK/($w1-$w0):.5f}')"
}

# A placeholder session keeps the server up while measured sessions come and go.
tmux -L "$SOCK" -f /dev/null new-session -d -s keep "sleep 3600"
tmux -L "$SOCK" new-session -d -s feed -x 80 -y 24 \
  "python3 $WORK/pace.py $WORK/lines.txt $RATE | TERM=xterm-256color $BIN --threads 4 --io-threads 4 --overlap"
FEED=$(measure feed "$DURATION")
tmux -L "$SOCK" capture-pane -p -t feed > "$OUT/feed-screen.txt"
tmux -L "$SOCK" kill-session -t feed

tmux -L "$SOCK" new-session -d -s idle -x 80 -y 24 \
  "sleep 3600 | TERM=xterm-256color $BIN"
IDLE=$(measure idle 10)
tmux -L "$SOCK" kill-session -t idle

STARTS=()
for run in 1 2 3; do
  t0=$(date +%s%N)
  tmux -L "$SOCK" new-session -d -s "replay$run" -x 80 -y 24 \
    "TERM=xterm-256color $BIN --replay $WORK/big.csv --paused"
  until tmux -L "$SOCK" capture-pane -p -t "replay$run" 2>/dev/null | grep -q "token 0/$ROWS"; do
    sleep 0.01
    if [ $(( ($(date +%s%N) - t0) / 1000000 )) -gt 20000 ]; then echo "error: replay did not start in 20 s" >&2; exit 1; fi
  done
  STARTS+=( $(( ($(date +%s%N) - t0) / 1000000 )) )
  tmux -L "$SOCK" capture-pane -p -t "replay$run" > "$OUT/replay-screen.txt"
  tmux -L "$SOCK" kill-session -t "replay$run"
done

CSV_BYTES=$(stat -c %s "$WORK/big.csv")
{
  echo "date_utc=$(date -u +%FT%TZ)"
  echo "host_cores=$(nproc)"
  echo "feed_rate_tok_s=$RATE"
  echo "feed_seconds=$DURATION"
  echo "feed_cpu_ratio_of_one_core=$FEED"
  echo "idle_cpu_ratio_of_one_core=$IDLE"
  echo "replay_rows=$ROWS"
  echo "replay_csv_bytes=$CSV_BYTES"
  echo "replay_start_ms=${STARTS[*]}"
} | tee "$OUT/results.txt"
echo "raw results in $OUT" >&2

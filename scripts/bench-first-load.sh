#!/usr/bin/env bash
# Cold first load, plain (llama.cpp's MAP_POPULATE, the baseline) vs --moe-stream (dense bytes
# only, issue #18): prints read_bytes (the kernel's /proc/<pid>/io of bmoe-cli) and load_s.
# Only MODEL is dropped from the page cache (dd nocache = POSIX_FADV_DONTNEED), never the system.
#
# usage: scripts/bench-first-load.sh MODEL.gguf [REPS=3] [extra bmoe-cli flags for the streamed run]
# env:   BMOE_CLI (default: target/release/bmoe-cli, else $CARGO_TARGET_DIR/release/bmoe-cli)
set -euo pipefail
model=${1:?usage: $0 MODEL.gguf [REPS] [streamed flags...]}
reps=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
cli=${BMOE_CLI:-}
if [[ -z $cli ]]; then
  for c in target/release/bmoe-cli "${CARGO_TARGET_DIR:-target}/release/bmoe-cli"; do
    [[ -x $c ]] && cli=$c && break
  done
fi
[[ -x ${cli:-} ]] || { echo "error: no bmoe-cli binary; hint: cargo build --release -p bmoe-engine or set BMOE_CLI" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

drop() { # the one model file (every shard of a split model)
  local f
  for f in "${model%-00001-of-*}"*; do
    [[ $f == *.gguf ]] || continue
    dd of="$f" oflag=nocache conv=notrunc,fdatasync count=0 2>/dev/null
    dd if="$f" iflag=nocache count=0 2>/dev/null
  done
}

run() { # label, flags...: one cold run; prints label read_MiB load_s streamer_MiB
  local label=$1; shift
  drop
  local io
  io=$(sh -c '"$0" "$@" >/dev/null 2>"$ERR" || { cat "$ERR" >&2; exit 9; }; cat /proc/$$/io' \
       "$cli" -m "$model" -p "first load" -n 1 -t 2 -c 128 --csv "$tmp/r.csv" "$@")
  local rb; rb=$(awk '/^read_bytes:/ {print $2}' <<<"$io")
  local sum; sum=$(grep '^# summary' "$tmp/r.csv" | tail -1)
  local load; load=$(tr ' ' '\n' <<<"$sum" | awk -F= '$1=="load_s"{print $2}')
  local st; st=$(tr ' ' '\n' <<<"$sum" | awk -F= '$1=="read_MiB"{r=$2} $1=="prefill_read_mib"{p=$2} $1=="row_read_MiB"{w=$2} END{printf "%.1f", r+p+w}')
  printf '%-9s read_MiB=%9.1f load_s=%7.3f streamer_read_MiB=%7.1f\n' \
    "$label" "$(awk -v b="$rb" 'BEGIN{printf "%.1f", b/1048576}')" "$load" "$st"
}

export ERR=$tmp/err
size=$(stat -c %s "$model")
echo "model $model ($(awk -v b="$size" 'BEGIN{printf "%.1f", b/1048576}') MiB), $reps cold runs each, bmoe-cli $cli"
echo "(read_MiB includes the run's one token; streamed: minus streamer_read_MiB = the load's reads;"
echo " streamer_read_MiB counts the experts and, with --row-stream, the rows fetched)"
for _ in $(seq "$reps"); do
  run plain
  run streamed --moe-stream "$@"
done

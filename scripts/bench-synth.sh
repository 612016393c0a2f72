#!/usr/bin/env bash
# Write throughput of `bmoe-bench model synth` for the qwen3-30b-a3b preset (~17 GB) against the
# disk's sequential write speed (dd, 1 MiB O_DIRECT blocks), measured in the same run, same disk.
#
# usage: scripts/bench-synth.sh [--dir DIR] [--keep PATH] [--dd-mib N] [-- extra synth options]
#   --dir DIR    where the temp directory goes (default: ${TMPDIR:-/tmp}); must be the disk to test
#   --keep PATH  move the written model to PATH afterwards (same filesystem: instant) instead of
#                deleting it
#   --dd-mib N   size of the dd probe in MiB (default 4096)
# env: BMOE_BENCH=path/to/bmoe-bench to skip the cargo build.
set -euo pipefail

dir="${TMPDIR:-/tmp}"
keep=""
dd_mib=4096
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) dir="$2"; shift 2 ;;
        --keep) keep="$2"; shift 2 ;;
        --dd-mib) dd_mib="$2"; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "error: unknown argument $1" >&2; echo "hint: see $0 --help" >&2; exit 2 ;;
    esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${BMOE_BENCH:-}"
if [ -z "$bin" ]; then
    (cd "$root" && cargo build --release -q -p bmoe-bench)
    bin="${CARGO_TARGET_DIR:-$root/target}/release/bmoe-bench"
fi

work="$(mktemp -d "$dir/bmoe-bench-synth.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

echo "# bench-synth $(date -u +%Y-%m-%dT%H:%M:%SZ) host=$(hostname) dir=$work"
echo "# fs: $(df -h "$work" | tail -1)"
echo "# cpus=$(nproc) mem=$(free -g | awk '/Mem:/ {print $2}')G"

# 1. Disk sequential write speed.
dd_out="$(dd if=/dev/zero of="$work/dd.bin" bs=1M count="$dd_mib" oflag=direct conv=fsync 2>&1 | tail -1)"
rm -f "$work/dd.bin"
dd_bytes="$(echo "$dd_out" | awk '{print $1}')"
dd_secs="$(echo "$dd_out" | awk '{print $(NF-3)}')"
dd_mbs="$(awk -v b="$dd_bytes" -v s="$dd_secs" 'BEGIN {printf "%.1f", b / 1e6 / s}')"
echo "dd: $dd_out"

# 2. The synthetic model.
synth_json="$("$bin" model synth --preset qwen3-30b-a3b "${extra[@]}" --json -o "$work/qwen3-30b-a3b.gguf")"
synth_bytes="$(echo "$synth_json" | awk -F'[:,]' '/"bytes"/ && !done {gsub(/ /, "", $2); print $2; done=1}')"
synth_secs="$(echo "$synth_json" | awk -F'[:,]' '/"elapsed_s"/ {gsub(/ /, "", $2); print $2}')"
synth_mbs="$(awk -v b="$synth_bytes" -v s="$synth_secs" 'BEGIN {printf "%.1f", b / 1e6 / s}')"
"$bin" model inspect "$work/qwen3-30b-a3b.gguf" | sed -n '1,13p'

echo "dd_write_bytes=$dd_bytes dd_write_s=$dd_secs dd_write_mb_s=$dd_mbs"
echo "synth_bytes=$synth_bytes synth_s=$synth_secs synth_mb_s=$synth_mbs"
awk -v a="$synth_mbs" -v b="$dd_mbs" 'BEGIN {printf "ratio synth/dd = %.2f (target >= 0.70)\n", a / b}'

if [ -n "$keep" ]; then
    mkdir -p "$(dirname "$keep")"
    mv "$work/qwen3-30b-a3b.gguf" "$keep"
    echo "kept $keep"
fi

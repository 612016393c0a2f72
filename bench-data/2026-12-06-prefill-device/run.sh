#!/usr/bin/env bash
# --prefill-device on the 30B preset's layer shape (issue #22): a 512-token prompt prefilled by
# the CPU and by lavapipe (routed mode and --no-prefill-routed), each run with the model file
# dropped from the page cache first. Usage: run.sh <bmoe-cli of a prefill-device release build>
# <model> <out dir>. The 4-layer model: bmoe-bench model synth --preset qwen3-30b-a3b --layers 4
# --router-skew 0.65 -o qwen3-30b-a3b-l4.gguf
set -euo pipefail
R="$1"; M="$2"; OUT="$3"
P="$(cat "$(dirname "$0")/prompt.txt")"
mkdir -p "$OUT"
drop() {
  python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)" "$M"
}
# the arena counts (routed, demand, read ahead, left) on stderr after the prefill
export BMOE_TEST_ARENA_COUNTS=1
for run in cpu dev-routed dev-demand; do
  case $run in
    cpu) extra=() ;;
    dev-routed) extra=(--prefill-device Vulkan0) ;;
    dev-demand) extra=(--prefill-device Vulkan0 --no-prefill-routed) ;;
  esac
  drop
  /usr/bin/time -f "$run wall=%e user=%U sys=%S" "$R" -m "$M" -p "$P" -n 1 -t 2 -c 1024 \
    --moe-stream --cache-mb 4096 --csv "$OUT/$run.csv" --io-trace "$OUT/$run-io.csv" \
    "${extra[@]}" > "$OUT/$run.out" 2> "$OUT/$run.err"
  echo "$run rc=$?"
  grep -o 'n_prompt=[^ ]*\|prefill_s=[^ ]*\|prefill_read_mib=[^ ]*\|prefill_io_s=[^ ]*\|prefill_dev[a-z_]*=[^ ]*' "$OUT/$run.csv" | tr '\n' ' '
  echo
done

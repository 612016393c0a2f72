R=/work/targets/vk-pd/prefill-device/release/bmoe-cli
M=/work/models/qwen3-30b-a3b.gguf
P="$(cat /tmp/vkb/prompt.txt)"
for dev in cpu dev; do
  extra=""; [ $dev = dev ] && extra="--prefill-device Vulkan0"
  python3 - <<'PY'
import os
fd=os.open("/work/models/qwen3-30b-a3b.gguf", os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)
PY
  /usr/bin/time -f "$dev wall=%e user=%U sys=%S" timeout 420 $R -m $M -p "$P" -n 1 -t 2 -c 1024 --moe-stream --csv /tmp/vkb/$dev.csv $extra > /tmp/vkb/$dev.out 2> /tmp/vkb/$dev.err
  echo "$dev rc=$?"
done

#!/bin/sh
# A/B of page recycling on the 17 GB model, cache off, debug build
for i in 1 2; do for v in 1 0; do
BMOE_DIAG_NO_RECYCLE=$v /usr/bin/time -f "norecycle=$v user=%U sys=%S wall=%e" "${BIN:-bmoe-cli}" -m /work/models/qwen3-30b-a3b.gguf --moe-stream -t 2 -c 256 -n 8 --feed-random 42 -p "hello" --csv ab17-$v-$i.csv > ab17-$v-$i.out 2>&1
uptime >> ab17-$v-$i.out
done; done

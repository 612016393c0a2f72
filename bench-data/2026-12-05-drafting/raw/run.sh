#!/bin/bash
# plain vs --mtp --draft 2, streamed, cache 256 MiB, adjacent pairs (A,B then B,A), the model
# dropped from the page cache before each run
set -u
BIN=/work/targets/mtp/release/bmoe-cli; M=/work/models/mtp-q36-6l.gguf; O=$(dirname "$0")
P="one two three four five. one two three four five."
run() { name=$1; shift; dd if=$M iflag=nocache count=0 status=none; echo "loadavg=$(cut -d' ' -f1-3 /proc/loadavg)" > $O/$name.env
  $BIN -m $M -p "$P" -n 16 -t 2 -c 512 --ignore-eos --moe-stream --cache-mb 256 --csv $O/$name.csv "$@" > $O/$name.out 2> $O/$name.err; echo "exit=$?" >> $O/$name.env; }
for pair in 1 2 3; do
  if [ $((pair%2)) = 1 ]; then order="a b"; else order="b a"; fi
  for v in $order; do
    if [ $v = a ]; then run a-p$pair; else run b-p$pair --mtp --draft 2; fi
  done
done

#!/usr/bin/env bash
# A/B benchmark of two engine variants in adjacent interleaved pairs (A,B then B,A), the model
# file dropped from the page cache (that file only) before every run, on the same pseudo-random
# token feed. Prints, per configuration, every pair's s/token and CPU-s/token ratio (B/A), the
# ratio of the median tokens, and the geometric mean of the pair ratios (scripts/ab_report.py).
#
# usage: scripts/bench-ab.sh MODEL OUT_DIR
# env:
#   CONFIGS   ';'-separated "label: bmoe-cli flags" run for both variants
#             (default "c0: --cache-mb 0; c4096: --cache-mb 4096")
#   A_FLAGS / B_FLAGS  flags only variant A / B adds (e.g. B_FLAGS=--overlap)
#   A_ENV / B_ENV      space-separated VAR=value for variant A / B's runs
#   LABEL_A / LABEL_B  names in the tables (default a / b)
#   BIN / BIN_B        bmoe-cli binaries (default: release build; BIN_B defaults to BIN)
#   PAIRS (default 3), N tokens per run (default 32), THREADS (default 2; empty: no -t, e.g. to
#   let --auto pick), FEED_SEED (default 42)
#   CGROUP_GIB  run every process inside a fresh memory cgroup of that size (root; v1 or v2)
# Needs root only for CGROUP_GIB. Results: OUT_DIR/raw/*.{csv,out,err,env}, OUT_DIR/report.txt.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

MODEL="${1:?usage: scripts/bench-ab.sh MODEL OUT_DIR}"
OUT="${2:?usage: scripts/bench-ab.sh MODEL OUT_DIR}"
CONFIGS="${CONFIGS:-c0: --cache-mb 0; c4096: --cache-mb 4096}"
A_FLAGS="${A_FLAGS:-}"
B_FLAGS="${B_FLAGS:-}"
A_ENV="${A_ENV:-}"
B_ENV="${B_ENV:-}"
LABEL_A="${LABEL_A:-a}"
LABEL_B="${LABEL_B:-b}"
PAIRS="${PAIRS:-3}"
N="${N:-32}"
THREADS="${THREADS-2}"
FEED_SEED="${FEED_SEED:-42}"
CGROUP_GIB="${CGROUP_GIB:-}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

say() { printf 'bench-ab: %s\n' "$*" >&2; }
die() { printf 'error: %s\nhint: %s\n' "$1" "$2" >&2; exit 1; }
[ -f "$MODEL" ] || die "model not found: $MODEL" "bmoe-bench model synth --preset qwen3-30b-a3b --router-skew 0.65 -o $MODEL"
case "$PAIRS" in '' | *[!0-9]* | 0) die "PAIRS='$PAIRS' is not a positive whole number" "PAIRS=3" ;; esac
if [ -z "${BIN:-}" ]; then
  say "building release bmoe-cli"
  cargo build --release -p bmoe-engine --bin bmoe-cli >&2
  BIN="$CARGO_TARGET_DIR/release/bmoe-cli"
fi
BIN_B="${BIN_B:-$BIN}"

CG=""
cg_setup() {
  local bytes=$((CGROUP_GIB * 1024 * 1024 * 1024))
  if [ -d /sys/fs/cgroup/memory ] && [ -w /sys/fs/cgroup/memory ]; then
    CG=/sys/fs/cgroup/memory/bmoe-ab-$$
    mkdir -p "$CG"
    echo "$bytes" > "$CG/memory.limit_in_bytes"
    echo "$bytes" > "$CG/memory.memsw.limit_in_bytes" 2>/dev/null || true
  elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    CG=/sys/fs/cgroup/bmoe-ab-$$
    mkdir -p "$CG"
    echo "$bytes" > "$CG/memory.max"
    echo 0 > "$CG/memory.swap.max" 2>/dev/null || true
  else
    die "no writable memory cgroup" "run as root, or leave CGROUP_GIB unset"
  fi
}
cg_cleanup() { if [ -n "$CG" ]; then rmdir "$CG" 2>/dev/null || true; fi; }
trap cg_cleanup EXIT
[ -z "$CGROUP_GIB" ] || cg_setup

mkdir -p "$OUT/raw"
{
  echo "date_utc=$(date -u +%FT%TZ) loadavg=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "model=$MODEL bytes=$(stat -c %s "$MODEL")"
  echo "bin=$BIN bin_b=$BIN_B engine=$("$BIN" --version | awk '{print $NF}') threads=$THREADS n=$N feed=random:$FEED_SEED pairs=$PAIRS cgroup_gib=${CGROUP_GIB:-none}"
  echo "a: label=$LABEL_A flags='$A_FLAGS' env='$A_ENV'"
  echo "b: label=$LABEL_B flags='$B_FLAGS' env='$B_ENV'"
  echo "configs='$CONFIGS'"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) nproc=$(nproc)"
} > "$OUT/raw/env.txt"

# The model's pages only: other users' page cache stays.
uncache_model() { dd if="$MODEL" iflag=nocache count=0 status=none 2>/dev/null || say "could not drop the model from the page cache"; }

run() { # config-label, variant (a|b), pair, then the config's flags
  local cfg="$1" v="$2" pair="$3"; shift 3
  local name="$cfg-$v-p$pair" bin="$BIN" envs="$A_ENV" extra="$A_FLAGS" status=0
  if [ "$v" = b ]; then bin="$BIN_B" envs="$B_ENV" extra="$B_FLAGS"; fi
  uncache_model
  say "run $name"
  echo "loadavg_before=$(cut -d' ' -f1-3 /proc/loadavg)" > "$OUT/raw/$name.env"
  local cmd=("$bin" -m "$MODEL" -p "The capital of Japan is" -n "$N" ${THREADS:+-t "$THREADS"} -c 512 \
    --feed-random "$FEED_SEED" --moe-stream --csv "$OUT/raw/$name.csv" "$@")
  # shellcheck disable=SC2206 # the flag lists are word lists
  cmd+=($extra)
  if [ -n "$CG" ]; then
    # shellcheck disable=SC2086
    env $envs sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" "${cmd[@]}" \
      > "$OUT/raw/$name.out" 2> "$OUT/raw/$name.err" || status=$?
  else
    # shellcheck disable=SC2086
    env $envs "${cmd[@]}" > "$OUT/raw/$name.out" 2> "$OUT/raw/$name.err" || status=$?
  fi
  echo "exit=$status loadavg_after=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/raw/$name.env"
  [ "$status" = 0 ] || say "run $name FAILED (exit $status; see $OUT/raw/$name.err)"
}

IFS=';' read -ra CFGS <<< "$CONFIGS"
for entry in "${CFGS[@]}"; do
  label="$(echo "${entry%%:*}" | xargs)"
  flags="${entry#*:}"
  for pair in $(seq 1 "$PAIRS"); do
    if [ $((pair % 2)) = 1 ]; then order="a b"; else order="b a"; fi
    for v in $order; do
      # shellcheck disable=SC2086
      run "$label" "$v" "$pair" $flags
    done
  done
done

python3 scripts/ab_report.py "$OUT" "$LABEL_A" "$LABEL_B" | tee "$OUT/report.txt"

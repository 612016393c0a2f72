#!/usr/bin/env bash
# Memory-policy benchmark: under a memory cgroup smaller than the model, compare
# --dense-weights mmap / warm / anon at a fixed cache, and --cache-mb auto; report tok/s, major
# faults/token, dense_resident_frac and the flash bytes per token (expert reads from the metrics
# CSV, plus everything the process read from the block device, dense re-faults included).
#
# usage: scripts/bench-engine-memory.sh [MODEL] [OUT_DIR]
#   MODEL    default $BMOE_MODELS/qwen3-30b-a3b.gguf ($BMOE_MODELS defaults to ~/.cache/bmoe; bmoe-gguf preset qwen3-30b-a3b)
#   OUT_DIR  default bench-data/$(date +%F)-engine-memory
# env: BIN (bmoe-cli to use; default: the debug build in $CARGO_TARGET_DIR, llama.cpp is -O3
#      there), N (tokens per run, default 16), THREADS (default 2), LIMIT_GIB (default 8) or
#      LIMIT_MIB (wins when set), CACHE_MB (fixed cache for the dense-policy runs, default 2048),
#      FEED_SEED (default 42), PROMPT (default "The capital of Japan is"), UBATCH (default 0 =
#      the whole prompt: a prefill loads the union of its tokens' experts per layer, so a small
#      limit may want a small ubatch),
#      RUNS (default "dense-mmap dense-anon auto-anon"; any of dense-mmap dense-warm dense-anon
#      auto-anon), REPS (default 1: each repetition runs every entry of RUNS once, in order, so
#      the policies are interleaved in time),
#      EVICT (default 1: before each run drop the model's (and COMPETE's) pages from the page
#      cache and empty the cgroup, so every run starts cold and its page cache is charged to it),
#      COMPETE (a file to read sequentially in a loop inside the same cgroup during every run: a
#      competing page-cache consumer), COMPETE_MBPS (its rate cap in MB/s; 0 = as fast as it can)
# Needs root for the memory cgroup (v1 /sys/fs/cgroup/memory or v2 /sys/fs/cgroup).
# Per-token device reads come from /proc/PID/io `read_bytes` sampled at each BMOE_PROGRESS line
# (O_DIRECT expert reads and page-fault read-around both count there); the table averages steps
# 2..N (the first line has no predecessor).
set -euo pipefail
export LC_ALL=C # byte-wise grep/sed/sort: answers of random-weight models are not UTF-8
cd "$(dirname "$0")/.."

MODEL="${1:-${BMOE_MODELS:-$HOME/.cache/bmoe}/qwen3-30b-a3b.gguf}"
OUT="${2:-bench-data/$(date -u +%F)-engine-memory}"
N="${N:-16}"
THREADS="${THREADS:-2}"
LIMIT_GIB="${LIMIT_GIB:-8}"
LIMIT_MIB="${LIMIT_MIB:-$((LIMIT_GIB * 1024))}"
CACHE_MB="${CACHE_MB:-2048}"
FEED_SEED="${FEED_SEED:-42}"
PROMPT="${PROMPT:-The capital of Japan is}"
UBATCH="${UBATCH:-0}"
RUNS="${RUNS:-dense-mmap dense-anon auto-anon}"
REPS="${REPS:-1}"
EVICT="${EVICT:-1}"
COMPETE="${COMPETE:-}"
COMPETE_MBPS="${COMPETE_MBPS:-0}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

say() { printf 'bench-engine-memory: %s\n' "$*" >&2; }
die() { printf 'error: %s\nhint: %s\n' "$1" "$2" >&2; exit 1; }
[ -f "$MODEL" ] || die "model not found: $MODEL" "bmoe-bench model synth --preset qwen3-30b-a3b -o $MODEL"
[ -z "$COMPETE" ] || [ -f "$COMPETE" ] || die "COMPETE file not found: $COMPETE" "COMPETE names a big file to read during each run (e.g. the skew0.65 model)"
for r in $RUNS; do
  case "$r" in dense-mmap | dense-warm | dense-anon | auto-anon) ;;
    *) die "unknown run '$r' in RUNS" "RUNS is a subset of: dense-mmap dense-warm dense-anon auto-anon" ;;
  esac
done
case "$REPS" in '' | *[!0-9]*) die "REPS='$REPS' is not a whole number" "REPS=3 runs every entry of RUNS three times, interleaved" ;; esac
if [ -z "${BIN:-}" ]; then
  cargo build -p bmoe-engine --bin bmoe-cli >&2
  BIN="$CARGO_TARGET_DIR/debug/bmoe-cli"
fi

bytes=$((LIMIT_MIB * 1024 * 1024))
name="bmoe-bench-memory-$$"
if [ -w /sys/fs/cgroup/memory ]; then
  CGV=1
  CG=/sys/fs/cgroup/memory/$name
  mkdir "$CG"
  echo "$bytes" > "$CG/memory.limit_in_bytes"
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && [ -w /sys/fs/cgroup ]; then
  CGV=2
  CG=/sys/fs/cgroup/$name
  mkdir "$CG"
  echo "$bytes" > "$CG/memory.max"
  echo 0 > "$CG/memory.swap.max" 2>/dev/null || true
else
  die "no writable memory cgroup" "run as root on a machine with cgroup v1 memory or cgroup v2"
fi

COMPETE_PID=""
stop_competitor() {
  if [ -n "$COMPETE_PID" ]; then
    kill -- "-$COMPETE_PID" 2>/dev/null || true
    wait "$COMPETE_PID" 2>/dev/null || true
    COMPETE_PID=""
  fi
}
cleanup() {
  stop_competitor
  rmdir "$CG" 2>/dev/null || true
}
trap cleanup EXIT

mkdir -p "$OUT/raw"
{
  echo "date_utc=$(date -u +%FT%TZ) loadavg=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "model=$MODEL bytes=$(stat -c %s "$MODEL")"
  echo "engine=$("$BIN" --version | awk '{print $NF}') bin=$BIN threads=$THREADS n=$N feed=random:$FEED_SEED limit_mib=$LIMIT_MIB cache_mb=$CACHE_MB ubatch=$UBATCH prompt='$PROMPT'"
  echo "runs='$RUNS' reps=$REPS evict=$EVICT compete=${COMPETE:-none} compete_mbps=$COMPETE_MBPS cgroup=v$CGV"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) nproc=$(nproc)"
  dev=$(basename "$(df --output=source "$MODEL" | tail -1)")
  echo "mem_total_kib=$(awk '/MemTotal/{print $2}' /proc/meminfo) read_ahead_kb($dev)=$(cat "/sys/block/$dev/queue/read_ahead_kb" 2>/dev/null || echo ?)"
} >> "$OUT/raw/env.txt"

# Drop a file's clean, unmapped pages from the page cache (POSIX_FADV_DONTNEED via dd).
uncache() { dd if="$1" iflag=nocache count=0 status=none 2>/dev/null || say "could not drop $1 from the page cache"; }

# Empty the cgroup between runs so one run's page cache does not crowd the next.
empty_cgroup() {
  if [ "$CGV" = 1 ]; then
    echo 0 > "$CG/memory.force_empty" 2>/dev/null || true
  else
    echo "$bytes" > "$CG/memory.reclaim" 2>/dev/null || true
  fi
}

cg_stat() { # key value lines of the cgroup's memory counters
  if [ "$CGV" = 1 ]; then
    grep -E '^(pgmajfault|workingset_refault_file|pgpgin) ' "$CG/memory.stat"
    echo "failcnt $(cat "$CG/memory.failcnt")"
    echo "max_usage_bytes $(cat "$CG/memory.max_usage_in_bytes")"
    echo "oom_kill $(awk '/^oom_kill /{print $2}' "$CG/memory.oom_control")"
  else
    grep -E '^(pgmajfault|workingset_refault_file) ' "$CG/memory.stat"
    echo "max_usage_bytes $(cat "$CG/memory.peak" 2>/dev/null || echo 0)"
    echo "oom_kill $(awk '/^oom_kill /{print $2}' "$CG/memory.events")"
  fi
}

# The competing reader: a sequential loop over COMPETE in 16 MiB chunks inside the cgroup,
# sleeping after each chunk so it stays under COMPETE_MBPS. Its own process group, so stopping
# it stops the dd in flight too.
start_competitor() {
  [ -n "$COMPETE" ] || return 0
  local size chunks pause
  size=$(stat -c %s "$COMPETE")
  chunks=$((size / (16 << 20)))
  pause=0
  [ "$COMPETE_MBPS" = 0 ] || pause=$(awk -v r="$COMPETE_MBPS" 'BEGIN { printf "%.3f", 16 * 1.048576 / r }')
  setsid sh -c '
    echo $$ > "$0/cgroup.procs" || exit 1
    i=0
    while :; do
      dd if="$1" of=/dev/null bs=16M count=1 skip=$i status=none
      i=$(( (i + 1) % $2 ))
      [ "$3" = 0 ] || sleep "$3"
    done' "$CG" "$COMPETE" "$chunks" "$pause" &
  COMPETE_PID=$!
}

run() { # label, flags...
  local label="$1"; shift
  local ub=()
  [ "$UBATCH" = 0 ] || ub=(--ubatch "$UBATCH")
  if [ "$EVICT" = 1 ]; then
    uncache "$MODEL"
    [ -z "$COMPETE" ] || uncache "$COMPETE"
    empty_cgroup
  fi
  echo "model_cached_bytes_before=$(fincore -b -n -o RES "$MODEL" 2>/dev/null || echo -1) loadavg=$(cut -d' ' -f1-3 /proc/loadavg)" > "$OUT/raw/$label.cg"
  cg_stat | sed 's/^/before /' >> "$OUT/raw/$label.cg"
  local cached
  cached=$(fincore -b -n -o RES "$MODEL" 2>/dev/null | tr -d ' ' || echo 0)
  if [ "$EVICT" = 1 ] && [ "${cached:-0}" -gt $((64 << 20)) ]; then
    say "warning: $((cached >> 20)) MiB of the model stayed in the page cache (another process maps it?): those pages stay charged to its cgroup, so this run is not under the full limit"
  fi
  start_competitor
  say "$label: $*"
  local fifo="$OUT/raw/.$label.fifo" pid status=0 line k v rb
  rm -f "$fifo"
  mkfifo "$fifo"
  sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" "$BIN" -m "$MODEL" -p "$PROMPT" \
    -n "$N" -t "$THREADS" -c 512 "${ub[@]}" --feed-random "$FEED_SEED" --moe-stream --progress \
    --csv "$OUT/raw/$label.csv" "$@" > "$fifo" 2> "$OUT/raw/$label.err" &
  pid=$!
  : > "$OUT/raw/$label.io"
  : > "$OUT/raw/$label.out"
  while IFS= read -r line; do
    case "$line" in
      BMOE_PROGRESS*)
        rb=-1
        while read -r k v; do [ "$k" = read_bytes: ] && rb=$v; done 2>/dev/null < "/proc/$pid/io" || true
        printf '%s %s\n' "$rb" "$(printf '%s' "$line" | sed -n 's/.*"step":\([0-9]*\).*/\1/p')" >> "$OUT/raw/$label.io" ;;
      BMOE_LOAD*) ;;
      *) printf '%s\n' "$line" >> "$OUT/raw/$label.out" ;;
    esac
  done < "$fifo"
  wait "$pid" || status=$?
  rm -f "$fifo"
  stop_competitor
  cg_stat | sed 's/^/after /' >> "$OUT/raw/$label.cg"
  echo "exit=$status" >> "$OUT/raw/$label.cg"
  [ "$status" = 0 ] || say "$label failed (exit $status; see $OUT/raw/$label.err)"
}

labels=()
for rep in $(seq 1 "$REPS"); do
  for r in $RUNS; do
    label="$r"
    [ "$REPS" = 1 ] || label="$r-r$rep"
    case "$r" in
      dense-mmap) run "$label" --cache-mb "$CACHE_MB" --dense-weights mmap ;;
      dense-warm) run "$label" --cache-mb "$CACHE_MB" --dense-weights warm ;;
      dense-anon) run "$label" --cache-mb "$CACHE_MB" --dense-weights anon ;;
      auto-anon) run "$label" --cache-mb auto --dense-weights anon ;;
    esac
    labels+=("$label")
  done
done

# One line per run from its own CSV (columns found by name), its device-read samples and the
# cgroup counters: resolved cache, tok/s, majflt/tok, mean dense_resident_frac, mean
# rss_file/rss_anon MiB, expert read MiB/token (CSV), device read MiB/token (steps 2..N),
# the cgroup's peak usage and OOM kills, and the model MiB cached before the run. (A device
# sample the process exited before is -1 and skipped.)
table() {
  printf '%-15s %8s %8s %10s %9s %8s %8s %10s %10s %8s %4s %9s %s\n' run cache_mb tok/s majflt/tok dense_res rss_file \
    rss_anon expert/tok device/tok peak_MiB oom cached0 exit
  for label in "${labels[@]}"; do
    f="$OUT/raw/$label.csv"
    cgf="$OUT/raw/$label.cg"
    dev=$(awk '$1 >= 0 && $2 != "" { if (!n++) { first = $1; s0 = $2 } last = $1; s1 = $2 }
      END { if (n > 1 && s1 > s0) printf "%.1f", (last - first) / (s1 - s0) / 1048576; else printf "-" }' \
      "$OUT/raw/$label.io" 2>/dev/null || echo -)
    peak=$(awk '/^after max_usage_bytes/ { printf "%.0f", $3 / 1048576 }' "$cgf" 2>/dev/null)
    oom=$(awk '/^before oom_kill/ { b = $3 } /^after oom_kill/ { a = $3 } END { print a - b }' "$cgf" 2>/dev/null)
    ex=$(sed -n 's/^exit=//p' "$cgf" 2>/dev/null)
    # model MiB already in the page cache at the start: pages another process keeps mapped
    # cannot be dropped, and they stay charged to that process's cgroup, not to this one
    c0=$(sed -n 's/^model_cached_bytes_before= *\([0-9-]*\).*/\1/p' "$cgf" 2>/dev/null | awk '{ printf "%.0f", $1 < 0 ? -1 : $1 / 1048576 }')
    if [ ! -s "$f" ] || ! grep -q '^# summary' "$f"; then
      printf '%-15s %8s %8s %10s %9s %8s %8s %10s %10s %8s %4s %9s %s\n' "$label" - - - - - - - "$dev" "${peak:--}" "${oom:--}" "${c0:--}" "${ex:--} (no summary)"
      continue
    fi
    awk -F, -v label="$label" -v dev="$dev" -v peak="${peak:--}" -v oom="${oom:--}" -v c0="${c0:--}" -v ex="${ex:--}" '
      /^# moe_stream=/ { n = split($0, kv, " "); for (i = 1; i <= n; i++) if (kv[i] ~ /^cache_mb=/) { sub("cache_mb=", "", kv[i]); cache = kv[i] } }
      /^# summary/ { n = split($0, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], p, "="); s[p[1]] = p[2] } }
      /^step,/ { for (i = 1; i <= NF; i++) col[$i] = i }
      /^[0-9]/ { rows++; fr0 = $col["dense_resident_frac"]; if (fr0 >= 0) { fr += fr0; frn++ }
                 rf += $col["rss_file_mib"]; ra += $col["rss_anon_mib"]; rb += $col["read_bytes"] }
      END {
        printf "%-15s %8s %8s %10s %9.3f %8.1f %8.1f %10.1f %10s %8s %4s %9s %s\n", label, cache, s["tok/s"], s["majflt/tok"],
          (frn ? fr / frn : -1), (rows ? rf / rows : 0), (rows ? ra / rows : 0), (rows ? rb / rows / 1048576 : 0), dev, peak, oom, c0, ex
      }' "$f"
  done
}
table | tee "$OUT/results.txt"

# Per policy across repetitions: median tok/s, and the median (min..max) of each repetition's
# ratio to dense-mmap of the same repetition (adjacent in time, so the machine's load cancels).
if [ "$REPS" -gt 1 ]; then
  awk 'NR > 1 && $3 != "-" {
         label = $1; rep = label; sub(/.*-r/, "", rep); pol = label; sub(/-r[0-9]+$/, "", pol)
         tps[pol, rep] = $3; pols[pol] = 1; reps[rep] = 1 }
       function median(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
         return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
       END {
         printf "\n%-11s %5s %12s %28s\n", "policy", "reps", "median tok/s", "tok/s ratio to mmap (min..max)"
         for (p in pols) {
           n = 0; m = 0; delete v; delete r
           for (k in reps) { if ((p, k) in tps) v[++n] = tps[p, k]
                             if ((p, k) in tps && ("dense-mmap", k) in tps && tps["dense-mmap", k] > 0) r[++m] = tps[p, k] / tps["dense-mmap", k] }
           lo = hi = (m ? r[1] : 0); for (i = 1; i <= m; i++) { if (r[i] < lo) lo = r[i]; if (r[i] > hi) hi = r[i] }
           printf "%-11s %5d %12.3f %14s (%.3f..%.3f)\n", p, n, median(v, n), (m ? sprintf("%.3f", median(r, m)) : "-"), lo, hi
         }
       }' "$OUT/results.txt" | tee -a "$OUT/results.txt"
fi
say "raw files in $OUT/raw; summary in $OUT/results.txt"

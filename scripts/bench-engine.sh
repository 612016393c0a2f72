#!/usr/bin/env bash
# Engine benchmark: tok/s of plain llama.cpp mmap vs --moe-stream at a few cache sizes, with and
# without a memory cgroup; O_DIRECT bandwidth at the per-expert read size; resident compute time;
# each streamed run put against its bound (resident compute + read bytes / O_DIRECT bandwidth).
#
# usage: scripts/bench-engine.sh [MODEL] [OUT_DIR]
#   MODEL    default $BMOE_MODELS/qwen3-30b-a3b.gguf ($BMOE_MODELS defaults to ~/.cache/bmoe; bmoe-gguf preset qwen3-30b-a3b)
#   OUT_DIR  default bench-data/$(date +%F)-engine
# env: BIN (a bmoe-cli to use instead of building release), N (tokens per run, default 24),
#      THREADS (default 2), LIMIT_GIB (default 8), CACHES (stream cache sizes in MiB, default
#      "0 2048 4096"), FEED_SEED (default 42),
#      SECTIONS (default "cold warm stream stream-io1 cg-plain cg-stream odirect"; the runs to do),
#      REPS (default 1; every section is repeated, in order, REPS times),
#      BIN_B / ENV_A / ENV_B (A/B: a second variant runs every configuration too, interleaved
#      A,B on odd and B,A on even repetitions; BIN_B is its binary (default BIN), ENV_A / ENV_B are
#      space-separated VAR=value settings for that variant's runs, e.g.
#      ENV_B="BMOE_DIAG_NO_RECYCLE=1"), LABEL_A / LABEL_B (default a / b),
#      BW_BIN (a built odirect_bw bench binary; default: cargo bench --profile dev),
#      BW_READS (default 2000), BW_THREADS (default 1,2,4,8),
#      DROP_ALL (1 = drop the whole page cache before cold runs, as root; default 0 = drop only
#      the model's pages, leaving other users' cache alone)
# Needs root for the memory cgroup (v1 /sys/fs/cgroup/memory or v2 /sys/fs/cgroup). Input:
# seeded pseudo-random tokens (--feed-random), never greedy output, so routing is not flattered
# by repetition (see specs/design.md).
set -euo pipefail
export LC_ALL=C # byte-wise grep/sed/sort: answers of random-weight models are not UTF-8
cd "$(dirname "$0")/.."

MODEL="${1:-${BMOE_MODELS:-$HOME/.cache/bmoe}/qwen3-30b-a3b.gguf}"
OUT="${2:-bench-data/$(date -u +%F)-engine}"
N="${N:-24}"
THREADS="${THREADS:-2}"
LIMIT_GIB="${LIMIT_GIB:-8}"
CACHES="${CACHES:-0 2048 4096}"
FEED_SEED="${FEED_SEED:-42}"
SECTIONS="${SECTIONS:-cold warm stream stream-io1 cg-plain cg-stream odirect}"
REPS="${REPS:-1}"
ENV_A="${ENV_A:-}"
ENV_B="${ENV_B:-}"
LABEL_A="${LABEL_A:-a}"
LABEL_B="${LABEL_B:-b}"
BW_READS="${BW_READS:-2000}"
BW_THREADS="${BW_THREADS:-1,2,4,8}"
DROP_ALL="${DROP_ALL:-0}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

say() { printf 'bench-engine: %s\n' "$*" >&2; }
die() { printf 'error: %s\nhint: %s\n' "$1" "$2" >&2; exit 1; }
[ -f "$MODEL" ] || die "model not found: $MODEL" "bmoe-bench model synth --preset qwen3-30b-a3b -o $MODEL"
case "$REPS" in '' | *[!0-9]* | 0) die "REPS='$REPS' is not a positive whole number" "REPS=3 repeats every section three times" ;; esac
for s in $SECTIONS; do
  case "$s" in cold | warm | stream | stream-io1 | cg-plain | cg-stream | odirect) ;;
    *) die "unknown section '$s' in SECTIONS" "SECTIONS is a subset of: cold warm stream stream-io1 cg-plain cg-stream odirect" ;;
  esac
done

if [ -z "${BIN:-}" ]; then
  say "building release bmoe-cli"
  cargo build --release -p bmoe-engine --bin bmoe-cli >&2
  BIN="$CARGO_TARGET_DIR/release/bmoe-cli"
fi
VARIANTS=("$LABEL_A")
if [ -n "${BIN_B:-}" ] || [ -n "$ENV_B" ]; then
  BIN_B="${BIN_B:-$BIN}"
  VARIANTS+=("$LABEL_B")
fi
variant_bin() { if [ "$1" = "$LABEL_A" ]; then echo "$BIN"; else echo "$BIN_B"; fi; }
variant_env() { if [ "$1" = "$LABEL_A" ]; then echo "$ENV_A"; else echo "$ENV_B"; fi; }

mkdir -p "$OUT/raw"
{
  echo "date_utc=$(date -u +%FT%TZ) loadavg=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "model=$MODEL bytes=$(stat -c %s "$MODEL")"
  echo "engine=$("$BIN" --version | awk '{print $NF}') bin=$BIN threads=$THREADS n=$N feed=random:$FEED_SEED limit_gib=$LIMIT_GIB caches='$CACHES'"
  echo "sections='$SECTIONS' reps=$REPS variants='${VARIANTS[*]}' env_a='$ENV_A' env_b='$ENV_B' bin_b=${BIN_B:-}"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) nproc=$(nproc)"
  echo "mem_total_kib=$(awk '/MemTotal/{print $2}' /proc/meminfo) mem_available_kib=$(awk '/MemAvailable/{print $2}' /proc/meminfo)"
} >> "$OUT/raw/env.txt"

uncache_model() {
  if [ "$DROP_ALL" = 1 ]; then
    sync
    echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || say "cannot drop caches (not root?)"
  else
    dd if="$MODEL" iflag=nocache count=0 status=none 2>/dev/null || say "could not drop the model from the page cache"
  fi
}
# Bring the whole model into the page cache (a plain warm run then measures resident compute).
warm_model() {
  local res size
  size=$(stat -c %s "$MODEL")
  res=$(fincore -b -n -o RES "$MODEL" 2>/dev/null | tr -d ' ' || echo 0)
  if [ "${res:-0}" -lt "$size" ]; then
    say "warming the page cache with the model ($((res >> 20)) of $((size >> 20)) MiB cached)"
    dd if="$MODEL" of=/dev/null bs=16M status=none
  fi
}

# --- memory cgroup (v1 or v2) -----------------------------------------------------------------
CG=""
cg_setup() {
  [ -z "$CG" ] || return 0
  local bytes=$((LIMIT_GIB * 1024 * 1024 * 1024))
  if [ -d /sys/fs/cgroup/memory ] && [ -w /sys/fs/cgroup/memory ]; then
    CG=/sys/fs/cgroup/memory/bmoe-bench-$$
    mkdir -p "$CG"
    echo "$bytes" > "$CG/memory.limit_in_bytes"
    echo "$bytes" > "$CG/memory.memsw.limit_in_bytes" 2>/dev/null || true
  elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    CG=/sys/fs/cgroup/bmoe-bench-$$
    mkdir -p "$CG"
    echo "$bytes" > "$CG/memory.max"
    echo 0 > "$CG/memory.swap.max" 2>/dev/null || true
  else
    say "no writable memory cgroup: skipping limited runs"
    CG=none
  fi
}
cg_cleanup() { [ -n "$CG" ] && [ "$CG" != none ] && rmdir "$CG" 2>/dev/null || true; }
trap cg_cleanup EXIT

COMMON=(-m "$MODEL" -p "The capital of Japan is" -n "$N" -t "$THREADS" -c 512 --feed-random "$FEED_SEED")

run() { # name, variant, in-cgroup (0/1), then bmoe-cli flags
  local name="$1" variant="$2" limited="$3"; shift 3
  local bin envs t0 t1 status=0
  bin=$(variant_bin "$variant")
  envs=$(variant_env "$variant")
  [ "${#VARIANTS[@]}" = 1 ] || name="$name-$variant"
  [ "$REPS" = 1 ] || name="$name-r$rep"
  say "run $name${envs:+ ($envs)}"
  echo "loadavg_before=$(cut -d' ' -f1-3 /proc/loadavg)" > "$OUT/raw/$name.env"
  t0=$(date +%s%N)
  if [ "$limited" = 1 ]; then
    # shellcheck disable=SC2086 # envs is a list of VAR=value words
    env $envs sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" "$bin" "${COMMON[@]}" --csv "$OUT/raw/$name.csv" "$@" \
      > "$OUT/raw/$name.out" 2> "$OUT/raw/$name.err" || status=$?
  else
    # shellcheck disable=SC2086
    env $envs "$bin" "${COMMON[@]}" --csv "$OUT/raw/$name.csv" "$@" > "$OUT/raw/$name.out" 2> "$OUT/raw/$name.err" || status=$?
  fi
  t1=$(date +%s%N)
  [ "$status" = 0 ] || say "run $name FAILED (exit $status; see $OUT/raw/$name.err)"
  {
    echo "process_wall_ms=$(( (t1 - t0) / 1000000 )) exit=$status"
    echo "loadavg_after=$(cut -d' ' -f1-3 /proc/loadavg)"
  } >> "$OUT/raw/$name.env"
}

# Variants in A,B order on odd repetitions and B,A on even ones.
order() { if [ $((rep % 2)) = 1 ]; then printf '%s\n' "${VARIANTS[@]}"; else printf '%s\n' "${VARIANTS[@]}" | tac; fi; }

for rep in $(seq 1 "$REPS"); do
  for s in $SECTIONS; do
    case "$s" in
      cold) # the first run pays the page-cache fill (load_s: llama.cpp reads the whole file)
        for v in $(order); do uncache_model; run plain-cold "$v" 0; done ;;
      warm) # resident: every weight in the page cache; its s/token is the resident compute time
        warm_model
        for v in $(order); do run plain-warm "$v" 0; done ;;
      stream) # no limit: the expert reads bypass the page cache (O_DIRECT), so it is left as is
        for c in $CACHES; do
          for v in $(order); do run "stream-c$c" "$v" 0 --moe-stream --cache-mb "$c"; done
        done ;;
      stream-io1)
        for v in $(order); do run stream-c0-io1 "$v" 0 --moe-stream --cache-mb 0 --io-threads 1; done ;;
      cg-plain) # limited runs start with the model out of the page cache, so what they fault is charged to the cgroup
        cg_setup
        [ "$CG" = none ] || for v in $(order); do uncache_model; run cg-plain "$v" 1; done ;;
      cg-stream)
        cg_setup
        if [ "$CG" != none ]; then
          for c in $CACHES; do
            for v in $(order); do uncache_model; run "cg-stream-c$c" "$v" 1 --moe-stream --cache-mb "$c"; done
          done
        fi ;;
      odirect) # O_DIRECT bandwidth at the per-expert read size (Q4_K 768x2048 slice = 884736 bytes)
        say "O_DIRECT bandwidth (rep $rep)"
        f="$OUT/raw/odirect.txt"
        [ "$REPS" = 1 ] || f="$OUT/raw/odirect-r$rep.txt"
        if [ -n "${BW_BIN:-}" ]; then
          "$BW_BIN" "$MODEL" 884736 "$BW_READS" "$BW_THREADS" > "$f" 2>/dev/null || say "odirect bench failed"
        else
          # dev profile: the loop is syscall-bound, and it reuses the llama.cpp build of the tests
          cargo bench --profile dev -p bmoe-engine --bench odirect_bw -- "$MODEL" 884736 "$BW_READS" "$BW_THREADS" \
            > "$f" 2>/dev/null || say "odirect bench failed"
        fi ;;
    esac
  done
done

# --- tables ------------------------------------------------------------------------------------
# One row per run, from its stdout summary lines.
per_run() {
  printf '%-24s %9s %8s %8s %8s %9s %8s %8s %8s %7s %8s %9s %s\n' run s/token tok/s p50_ms p10_ms read/tok compute mgmt io_s MiB/s load_s majflt/t mode
  for f in "$OUT"/raw/*.out; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .out)
    p50=-
    p10=-
    gen=$(grep -a -m1 '^generation:' "$f" || true)
    stok=$(echo "$gen" | sed -n 's/.*, \([0-9.]*\) s\/token.*/\1/p')
    tps=$(echo "$gen" | sed -n 's/.*(\([0-9.]*\) tok\/s).*/\1/p')
    # the metrics CSV has wall_ms per token to the microsecond (the summary line rounds to ms)
    csv="$OUT/raw/$name.csv"
    if [ -n "$stok" ] && [ -s "$csv" ]; then
      stok=$(awk -F, '/^step,/ { for (i = 1; i <= NF; i++) if ($i == "wall_ms") w = i } /^[0-9]/ && w { s += $w; n++ }
        END { if (n) printf "%.6f", s / n / 1000 }' "$csv")
      tps=$(awk -v s="$stok" 'BEGIN { if (s > 0) printf "%.3f", 1 / s }')
      # per-token wall-time median and 10th percentile: on a shared machine the low percentiles
      # are the tokens that ran without being descheduled
      read -r p50 p10 < <(awk -F, '/^step,/ { for (i = 1; i <= NF; i++) if ($i == "wall_ms") w = i } /^[0-9]/ && w { print $w }' "$csv" \
        | sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%.3f %.3f\n", v[int((NR + 1) / 2)], v[int((NR + 9) / 10)]; else print "- -" }')
    fi
    ms=$(grep -a -m1 '^moe-stream:' "$f" || true)
    rd=$(echo "$ms" | sed -n 's/.*read [0-9.]* MiB (\([0-9.]*\) MiB\/token).*/\1/p')
    cmp=$(echo "$ms" | sed -n 's/.*(compute \([0-9.]*\) + .*/\1/p')
    mg=$(echo "$ms" | sed -n 's/.*cache mgmt \([0-9.]*\) + .*/\1/p')
    io=$(echo "$ms" | sed -n 's/.*flash I\/O \([0-9.]*\) s\/token.*/\1/p')
    bw=$(echo "$ms" | sed -n 's/.*s\/token, \([0-9.]*\) MiB\/s).*/\1/p')
    load=$(sed -n 's/.*model load \([0-9.]*\) s.*/\1/p' "$f")
    mf=$(sed -n 's/^compute:.*, \([0-9.]*\) major faults\/token.*/\1/p' "$f")
    mode=$(grep -a -m1 '^mode:' "$f" | cut -c7-40 || true)
    printf '%-24s %9s %8s %8s %8s %9s %8s %8s %8s %7s %8s %9s %s\n' "$name" "${stok:--}" "${tps:--}" "$p50" "$p10" "${rd:--}" "${cmp:--}" \
      "${mg:--}" "${io:--}" "${bw:--}" "${load:--}" "${mf:--}" "$mode"
  done
}
per_run > "$OUT/runs.txt"
cat "$OUT"/raw/odirect*.txt > "$OUT/odirect.txt" 2>/dev/null || true

# Per configuration and variant: medians over repetitions; with two variants, the median
# (min..max) of B's s/token over A's in the same repetition. Then the bound of every streamed
# run without a limit: resident compute (median plain-warm s/token of the same variant) + read
# MiB/token / the best O_DIRECT MiB/s measured with the run's lane count (4, or 1 for -io1), and
# the gap split into flash (io_s - read/bw), compute residual (compute - resident) and mgmt.
awk -v A="$LABEL_A" -v B="$LABEL_B" -v nvar="${#VARIANTS[@]}" '
  function median(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  function med(key, field,   i, n, v) { n = 0; for (i = 1; i <= cnt[key]; i++) if (val[key, i, field] != "-") v[++n] = val[key, i, field]
    return n ? median(v, n) : -1 }
  FILENAME ~ /odirect/ { for (i = 1; i <= NF; i++) { split($i, p, "="); kv[p[1]] = p[2] }
    if (kv["MiB/s"] > best[kv["threads"]]) best[kv["threads"]] = kv["MiB/s"]; bws[kv["threads"]] = bws[kv["threads"]] " " kv["MiB/s"]; next }
  FNR == 1 { next }
  $2 != "-" {
    name = $1; rep = 1; if (match(name, /-r[0-9]+$/)) { rep = substr(name, RSTART + 2); name = substr(name, 1, RSTART - 1) }
    var = A; if (nvar > 1) { var = name; sub(/.*-/, "", var); sub("-" var "$", "", name) }
    key = name SUBSEP var; if (!(key in cnt)) { order[++nkeys] = key; cfgs[name] = 1 }
    i = ++cnt[key]; val[key, i, "stok"] = $2; val[key, i, "p50"] = $4; val[key, i, "p10"] = $5
    val[key, i, "read"] = $6; val[key, i, "cmp"] = $7; val[key, i, "mgmt"] = $8; val[key, i, "io"] = $9
    byrep[name, var, rep] = $2; by50[name, var, rep] = $4; by10[name, var, rep] = $5; reps[rep] = 1
  }
  END {
    printf "\n%-16s %-8s %4s %9s %8s %8s %9s %9s %9s %9s\n", "config", "variant", "reps", "s/token", "p50_ms", "p10_ms", "read/tok", "compute", "mgmt", "io_s"
    for (k = 1; k <= nkeys; k++) { split(order[k], kk, SUBSEP)
      printf "%-16s %-8s %4d %9.5f %8.3f %8.3f %9.1f %9.3f %9.3f %9.3f\n", kk[1], kk[2], cnt[order[k]], med(order[k], "stok"), med(order[k], "p50"),
        med(order[k], "p10"), med(order[k], "read"), med(order[k], "cmp"), med(order[k], "mgmt"), med(order[k], "io") }
    if (nvar > 1) {
      printf "\n%s / %s per repetition (adjacent runs), median (min..max) over repetitions:\n", B, A
      printf "%-16s %26s %26s %26s\n", "config", "mean s/token", "p50 token", "p10 token"
      for (c in cfgs) { line = ""; any = 0
        for (w = 1; w <= 3; w++) { m = 0; delete r
          for (q in reps) { a = (w == 1 ? byrep[c, A, q] : w == 2 ? by50[c, A, q] : by10[c, A, q])
                            b = (w == 1 ? byrep[c, B, q] : w == 2 ? by50[c, B, q] : by10[c, B, q])
                            if (a != "" && b != "" && a != "-" && b != "-" && a > 0) r[++m] = b / a }
          if (!m) { line = line sprintf(" %26s", "-"); continue }
          any = 1; lo = hi = r[1]; for (i = 1; i <= m; i++) { if (r[i] < lo) lo = r[i]; if (r[i] > hi) hi = r[i] }
          line = line sprintf(" %26s", sprintf("%.4f (%.4f..%.4f) n=%d", median(r, m), lo, hi, m)) }
        if (any) printf "%-16s%s\n", c, line }
    }
    if (length(best)) {
      printf "\nO_DIRECT MiB/s per lane count (all passes; best):"
      for (t in best) printf "  %s lanes:%s (best %s)", t, bws[t], best[t]
      printf "\n"
    }
    nb = 0
    for (k = 1; k <= nkeys; k++) { split(order[k], kk, SUBSEP); if (kk[1] !~ /^stream-c/) continue
      res = med("plain-warm" SUBSEP kk[2], "stok"); lanes = (kk[1] ~ /-io1$/) ? 1 : 4; bw = best[lanes]
      if (res <= 0 || bw <= 0) continue
      if (!nb++) printf "\n%-16s %-8s %8s %8s %6s | %10s %10s %8s  (gap split, s/token)\n", "streamed run", "variant", "s/token", "bound", "ratio", "flash", "compute", "mgmt"
      s = med(order[k], "stok"); rd = med(order[k], "read"); io = med(order[k], "io"); cm = med(order[k], "cmp"); mg = med(order[k], "mgmt")
      bound = res + rd / bw
      printf "%-16s %-8s %8.3f %8.3f %6.3f | %+10.3f %+10.3f %+8.3f  (resident %.3f, %.1f MiB at %d MiB/s = %.3f s; flash ran at %.0f MiB/s = %.2f of best)\n",
        kk[1], kk[2], s, bound, s / bound, io - rd / bw, cm - res, mg, res, rd, bw, rd / bw, (io > 0 ? rd / io : 0), (io > 0 ? rd / io / bw : 0)
    }
  }' "$OUT/runs.txt" $(ls "$OUT"/raw/odirect*.txt 2>/dev/null) > "$OUT/summary.txt"
{ cat "$OUT/runs.txt"; cat "$OUT/summary.txt"; echo; cat "$OUT/odirect.txt" 2>/dev/null || true; } | tee "$OUT/table.txt"
say "results in $OUT (write findings.md by hand from table.txt)"

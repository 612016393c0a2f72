#!/usr/bin/env bash
# What the kept prefix state saves a `decide`: the same long-prefix classification asked N times
# with different questions, with `reuse_prefix:true` (restore the prefix, prefill the question)
# and `reuse_prefix:false` (prefill everything), interleaved in one session per mode, on a
# synthetic MoE model written for the run. Prints per mode the medians of the prefill work and
# the cold/reuse ratios measured in the same run.
#
# usage: scripts/bench-decide.sh [--dir DIR] [--n N] [--prefix-bytes B] [-- extra bmoe-cli flags]
#   --dir DIR         where the model is written (default: ${TMPDIR:-/tmp}; not tmpfs for O_DIRECT)
#   --n N             questions per mode (default 4)
#   --prefix-bytes B  length of the shared prefix text (default 800; byte-level vocab: ~1 token
#                     per byte)
# env: BIN=path/to/bmoe-cli and BMOE_BENCH=path/to/bmoe-bench to skip the cargo builds.
set -euo pipefail

dir="${TMPDIR:-/tmp}"
n=4
prefix_bytes=800
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) dir="$2"; shift 2 ;;
        --n) n="$2"; shift 2 ;;
        --prefix-bytes) prefix_bytes="$2"; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "error: unknown argument $1" >&2; echo "hint: see $0 --help" >&2; exit 2 ;;
    esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
cli="${BIN:-}"
if [ -z "$cli" ]; then
    (cd "$root" && cargo build --release -q -p bmoe-engine)
    cli="$target/release/bmoe-cli"
fi
bench="${BMOE_BENCH:-}"
if [ -z "$bench" ]; then
    (cd "$root" && cargo build --release -q -p bmoe-bench)
    bench="$target/release/bmoe-bench"
fi

work="$(mktemp -d "$dir/bmoe-bench-decide.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

echo "# bench-decide $(date -u +%Y-%m-%dT%H:%M:%SZ) host=$(hostname) cpus=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg)"
echo "# bin=$cli"
model="$work/decide-moe.gguf"
"$bench" model synth --preset tiny --layers 8 --experts 32 --top-k 4 --embd 1024 --ff 512 \
    --heads 8 --kv-heads 2 --head-dim 128 -o "$model" >/dev/null
echo "# model: 8 layers x 32 experts (top-4), n_embd 1024, $(($(stat -c %s "$model") / 1048576)) MiB"

# The shared prefix: a document of prefix_bytes bytes; the questions differ per request.
doc="$(awk -v n="$prefix_bytes" 'BEGIN {
    s = "The engine streams the routed experts of each layer from flash into a cache. "
    while (length(out) < n) out = out s
    print substr(out, 1, n) }')"
requests() {
    for i in $(seq 1 "$n"); do
        for reuse in true false; do
            printf '{"cmd":"decide","id":%d,"prefix":"%s ","suffix":"Question %d: is that so?","choices":["yes","no","maybe"],"reuse_prefix":%s}\n' \
                "$i" "$doc" "$i" "$reuse"
        done
    done
}

# field NAME from BMOE_DECIDE lines, one value per line
field() { sed -n "s/.*\"$1\":\([-0-9.e]*\).*/\1/p"; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

run_mode() {
    local label="$1"; shift
    local out="$work/$label.out"
    requests | "$cli" -m "$model" --session --decide --chatml -t 2 -c 4096 "$@" "${extra[@]}" \
        >"$out" 2>"$work/$label.err" || { cat "$work/$label.err" >&2; exit 1; }
    local lines="$work/$label.lines"
    grep '^BMOE_DECIDE' "$out" >"$lines"
    # request pairs: odd lines reuse, even lines cold; the first reuse call stores (dropped)
    awk 'NR % 2 == 1 && NR > 1' "$lines" >"$work/$label.reuse"
    awk 'NR % 2 == 0' "$lines" >"$work/$label.cold"
    for kind in reuse cold; do
        local f="$work/$label.$kind"
        local pre rest read npre
        pre="$(field prefill_s <"$f" | median)"
        rest="$(field restore_s <"$f" | median)"
        read="$(field prefill_read_mib <"$f" | median)"
        npre="$(field n_prefilled <"$f" | median)"
        echo "$label $kind n=$(wc -l <"$f") n_prefilled=$npre prefill_s=$pre restore_s=$rest prefill_read_mib=$read"
        eval "${label//-/_}_${kind}_s=$(awk -v a="$pre" -v b="$rest" 'BEGIN {print a + b}')"
        eval "${label//-/_}_${kind}_mib=$read"
    done
    local cold_s reuse_s cold_mib reuse_mib
    cold_s="${label//-/_}_cold_s"; reuse_s="${label//-/_}_reuse_s"
    cold_mib="${label//-/_}_cold_mib"; reuse_mib="${label//-/_}_reuse_mib"
    awk -v c="${!cold_s}" -v r="${!reuse_s}" -v cm="${!cold_mib}" -v rm="${!reuse_mib}" -v l="$label" \
        'BEGIN {printf "%s ratio cold/reuse: time (prefill+restore) %.2fx", l, c / r;
                if (rm > 0) printf ", flash read %.2fx", cm / rm; printf "\n"}'
    # the scores must agree pairwise (same question, reuse vs cold)
    local scores='s/.*"choice_logp":\(\[[^]]*\]\).*/\1/'
    if ! diff <(awk 'NR % 2 == 1' "$lines" | sed "$scores") \
              <(awk 'NR % 2 == 0' "$lines" | sed "$scores") >/dev/null; then
        echo "error: $label: reuse and cold scores differ" >&2; exit 1
    fi
}

run_mode resident
run_mode streamed-nocache --moe-stream --cache-mb 0

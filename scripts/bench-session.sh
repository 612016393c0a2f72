#!/usr/bin/env bash
# What session mode saves, measured in one run of one `bmoe-cli --session` process per case:
#   1. continuing a chat: turn 2 (clear_kv:false) prefills only what the KV does not hold; compared
#      with prefilling the same whole conversation from scratch (a new chat whose prompt is the
#      rendered history, raw) — tokens and seconds, as ratios;
#   2. the warm expert cache: the same prompt twice as new chats with --moe-stream and a cache that
#      holds every expert — flash read and hit rate of turn 2 against turn 1.
#
# usage: scripts/bench-session.sh [-m MODEL] [--history-words N]
#   -m MODEL           GGUF model (default: the built-in tiny synthetic model)
#   --history-words N  words in turn 1's user message (default 600)
# env: BMOE_CLI=path/to/bmoe-cli to skip the cargo build (release).
set -euo pipefail

model=()
words=600
while [ $# -gt 0 ]; do
    case "$1" in
        -m) model=(-m "$2"); shift 2 ;;
        --history-words) words="$2"; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "error: unknown argument $1" >&2; echo "hint: see $0 --help" >&2; exit 2 ;;
    esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
cli="${BMOE_CLI:-}"
if [ -z "$cli" ]; then
    (cd "$root" && cargo build --release -q -p bmoe-engine)
    cli="${CARGO_TARGET_DIR:-$root/target}/release/bmoe-cli"
fi

echo "# bench-session $(date -u +%Y-%m-%dT%H:%M:%SZ) host=$(hostname) cli=$cli model=${model[*]:-builtin}"
BMOE_CLI_PATH="$cli" WORDS="$words" python3 - "${model[@]}" <<'PY'
import json, os, subprocess, sys

cli = os.environ["BMOE_CLI_PATH"]
words = int(os.environ["WORDS"])
model = sys.argv[1:]

def session(args, requests):
    """Runs one session; returns the BMOE_DONE records in order."""
    stdin = "".join(json.dumps(r) + "\n" for r in requests)
    p = subprocess.run([cli, *model, "--session", "-t", "2", "-c", "4096", *args],
                       input=stdin, capture_output=True, text=True, check=True)
    done = []
    for line in p.stdout.splitlines():
        if line.startswith("BMOE_ERROR"):
            sys.exit(f"error: {line}")
        if line.startswith("BMOE_DONE "):
            done.append(json.loads(line[len("BMOE_DONE "):]))
    return done

history = " ".join(f"w{i}" for i in range(words))
follow = "And one more question?"
# 1. continue vs prefill the whole conversation again
t1, t2 = session(["--chatml"], [
    {"cmd": "generate", "id": 1, "prompt": history, "n_predict": 16},
    {"cmd": "generate", "id": 2, "prompt": follow, "n_predict": 4, "clear_kv": False},
])
# the same conversation, rendered the way the engine renders it, prefilled from nothing
im = lambda role, text: f"<|im_start|>{role}\n{text}<|im_end|>\n"
rendered = im("user", history) + im("assistant", t1["text"]) + im("user", follow) + "<|im_start|>assistant\n"
(fresh,) = session([], [{"cmd": "generate", "id": 3, "prompt": rendered, "n_predict": 4}])
ctx2 = t2["n_past"] - t2["tokens"]
print(f"continue: turn 2 prefilled {t2['n_prompt']} of {ctx2} context tokens "
      f"({t2['n_prompt'] / ctx2:.3f}) in {t2['prefill_s']:.3f} s; "
      f"the whole conversation from scratch: {fresh['n_prompt']} tokens in {fresh['prefill_s']:.3f} s")
print(f"continue: prefill time ratio continue/scratch = {t2['prefill_s'] / fresh['prefill_s']:.3f}"
      + ("" if fresh["n_prompt"] == ctx2 else
         f"  (note: the raw render tokenized to {fresh['n_prompt']} tokens, the session's to {ctx2}:"
         " this model's template is not the ChatML assumed here)"))

# 2. warm cache: same prompt twice, new chat each time, a cache that holds every expert
prompt = " ".join(f"v{i}" for i in range(words // 4))
a, b = session(["--chatml", "--moe-stream", "--cache-mb", "4096"], [
    {"cmd": "generate", "id": 1, "prompt": prompt, "n_predict": 16},
    {"cmd": "generate", "id": 2, "prompt": prompt, "n_predict": 16},
])
ra = a["read_mib"] + a["prefill_read_mib"]
rb = b["read_mib"] + b["prefill_read_mib"]
print(f"warm cache: flash read turn 1 {ra:.1f} MiB, turn 2 {rb:.1f} MiB (ratio {rb / ra if ra else 0:.3f}); "
      f"cumulative hit rate {a['cache_hit_pct']:.1f} % -> {b['cache_hit_pct']:.1f} %; "
      f"prefill {a['prefill_s']:.3f} s -> {b['prefill_s']:.3f} s "
      f"(ratio {b['prefill_s'] / a['prefill_s']:.3f}), tok/s {a['tok_s']:.1f} -> {b['tok_s']:.1f}")
PY

#!/usr/bin/env python3
"""Each overlap run of scripts/bench-overlap.sh against its bound: max(resident compute per token,
miss bytes per token ÷ the read bandwidth of the serial run of the same pair). A ratio ≤ 1.15 meets
the target; serial runs are printed against the same bound for reference.

usage: scripts/overlap_bound.py OUT_DIR   (stdlib only)
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_report import fnum, read_run  # noqa: E402


def main():
    out = Path(sys.argv[1])
    _, resident = read_run(out / "resident.csv")
    compute = fnum(resident, "s/tok")
    print(f"resident compute: {compute:.3f} s/token (plain run, whole file cached)")
    print(f"{'run':<34} {'s/tok':>7} {'MiB/tok':>8} {'MB/s':>7} {'bound':>7} {'ratio':>6} {'serial':>7} {'ratio':>6}")
    for sub in sorted(p for p in out.iterdir() if (p / "raw").is_dir()):
        pairs = {}
        for p in sorted((sub / "raw").glob("*.csv")):
            m = re.fullmatch(r"(.+)-([ab])-p(\d+)", p.stem)
            if m:
                pairs.setdefault((m.group(1), int(m.group(3))), {})[m.group(2)] = read_run(p)[1]
        for (cfg, pair), runs in sorted(pairs.items()):
            if set(runs) != {"a", "b"}:
                continue
            a, b = runs["a"], runs["b"]
            mib_tok = fnum(b, "read_MiB") / max(fnum(b, "tokens"), 1)
            # serial: io_s is wall time blocked on reads, so read/io is the lanes' bandwidth
            bw = fnum(a, "read_MiB") / fnum(a, "io_s") if fnum(a, "io_s") > 0 else float("inf")
            bound = max(compute, mib_tok / bw) if bw > 0 else compute
            sb, sa = fnum(b, "s/tok"), fnum(a, "s/tok")
            print(f"{sub.name + '/' + cfg + ' p' + str(pair):<34} {sb:7.3f} {mib_tok:8.1f} {bw * 1.048576:7.0f} "
                  f"{bound:7.3f} {sb / bound:6.2f} {sa:7.3f} {sa / bound:6.2f}")


if __name__ == "__main__":
    main()

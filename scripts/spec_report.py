#!/usr/bin/env python3
"""What speculation cost and bought in a scripts/bench-speculation.sh run: per variant directory
and configuration, the mean over pairs of flash MiB/token (the per-token `read_bytes` column,
speculative reads included), the speculative share of those bytes (trailer `spec_read_MiB`
over the run's read bytes) and the useful fraction (`spec_useful / spec_experts`), for the
runs without prefetch (a) and with it (b).

usage: scripts/spec_report.py OUT_DIR
Reads OUT_DIR/<variant>/raw/<config>-<a|b>-p<pair>.csv. Stdlib only.
"""

import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_report import read_run  # noqa: E402

NAME = re.compile(r"^(?P<cfg>.+)-(?P<v>[ab])-p(?P<pair>\d+)\.csv$")


def one(path):
    rows, trailer = read_run(path)
    read = [float(r["read_bytes"]) for r in rows if r.get("read_bytes") not in (None, "")]
    if not read:
        return None
    mib_tok = statistics.mean(read) / 2**20
    total = sum(read) / 2**20
    spec = float(trailer.get("spec_read_MiB", 0) or 0)
    experts = int(trailer.get("spec_experts", 0) or 0)
    useful = int(trailer.get("spec_useful", 0) or 0)
    return mib_tok, (spec / total if total > 0 else 0.0), (useful / experts if experts else None)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/spec_report.py OUT_DIR")
    out = Path(sys.argv[1])
    print(f"{'variant':<12} {'config':<10} {'run':<4} {'MiB/tok':>9} {'spec share':>10} {'useful':>8}")
    for d in sorted(p for p in out.iterdir() if (p / "raw").is_dir()):
        groups = {}
        for f in sorted((d / "raw").glob("*.csv")):
            m = NAME.match(f.name)
            r = m and one(f)
            if r:
                groups.setdefault((m["cfg"], m["v"]), []).append(r)
        for (cfg, v), rs in sorted(groups.items()):
            mib = statistics.mean(r[0] for r in rs)
            share = statistics.mean(r[1] for r in rs)
            us = [r[2] for r in rs if r[2] is not None]
            useful = f"{100 * statistics.mean(us):.1f}%" if us else "-"
            print(f"{d.name:<12} {cfg:<10} {v:<4} {mib:>9.1f} {100 * share:>9.1f}% {useful:>8}")


if __name__ == "__main__":
    main()

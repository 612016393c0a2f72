#!/usr/bin/env python3
"""The A/B table of scripts/bench-ab.sh: per configuration, each adjacent pair's s/token and
CPU-s/token (B/A), the ratio of the median tokens, and the geometric mean of the pair ratios.

usage: scripts/ab_report.py OUT_DIR LABEL_A LABEL_B
Reads OUT_DIR/raw/<config>-<a|b>-p<pair>.csv (bmoe-cli --csv files). Stdlib only.
"""

import csv
import math
import re
import statistics
import sys
from pathlib import Path


def read_run(path):
    """Per-token columns and the `# summary` trailer of one metrics CSV."""
    rows, trailer = [], {}
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    body = [l for l in lines if not l.startswith("#")]
    for l in lines:
        if l.startswith("# summary "):
            for kv in l[len("# summary "):].split():
                k, _, v = kv.partition("=")
                trailer[k] = v
    if body:
        for r in csv.DictReader(body):
            rows.append(r)
    return rows, trailer


def col(rows, name):
    out = []
    for r in rows:
        try:
            out.append(float(r[name]))
        except (KeyError, ValueError):
            pass
    return out


def fnum(trailer, key):
    try:
        return float(trailer[key])
    except (KeyError, ValueError):
        return float("nan")


def geomean(xs):
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    out, la, lb = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    runs = {}
    for p in sorted((out / "raw").glob("*.csv")):
        m = re.fullmatch(r"(.+)-([ab])-p(\d+)", p.stem)
        if not m:
            continue
        cfg, v, pair = m.group(1), m.group(2), int(m.group(3))
        rows, trailer = read_run(p)
        runs.setdefault(cfg, {}).setdefault(pair, {})[v] = (rows, trailer)
    if not runs:
        print(f"no runs under {out}/raw", file=sys.stderr)
        sys.exit(1)
    for cfg in sorted(runs):
        pairs = runs[cfg]
        print(f"== {cfg}: b = {lb}, a = {la}")
        print(f"{'pair':>4} {'a s/tok':>8} {'b s/tok':>8} {'b/a':>6}  {'a cpu-s':>8} {'b cpu-s':>8} {'b/a':>6}"
              f"  {'a p50ms':>8} {'b p50ms':>8} {'b/a':>6}  {'a MiB/t':>7} {'b MiB/t':>7}  {'b stall':>7}")
        sr, cr, mr = [], [], []
        all_a, all_b = [], []
        for pair in sorted(pairs):
            if set(pairs[pair]) != {"a", "b"}:
                print(f"{pair:>4} incomplete pair (a run failed?)")
                continue
            (ra, ta), (rb, tb) = pairs[pair]["a"], pairs[pair]["b"]
            sa, sb = fnum(ta, "s/tok"), fnum(tb, "s/tok")
            ca, cb = fnum(ta, "cpu_s/tok"), fnum(tb, "cpu_s/tok")
            wa, wb = col(ra, "wall_ms"), col(rb, "wall_ms")
            all_a += wa
            all_b += wb
            ma = statistics.median(wa) if wa else float("nan")
            mb = statistics.median(wb) if wb else float("nan")
            rda = sum(col(ra, "read_bytes")) / max(len(ra), 1) / 2**20
            rdb = sum(col(rb, "read_bytes")) / max(len(rb), 1) / 2**20
            stall_b = fnum(tb, "stall_s/tok")
            sr.append(sb / sa)
            cr.append(cb / ca if ca > 0 else float("nan"))
            mr.append(mb / ma)
            print(f"{pair:>4} {sa:8.3f} {sb:8.3f} {sb / sa:6.3f}  {ca:8.4f} {cb:8.4f} {cb / ca if ca > 0 else float('nan'):6.3f}"
                  f"  {ma:8.1f} {mb:8.1f} {mb / ma:6.3f}  {rda:7.1f} {rdb:7.1f}  {stall_b:7.3f}")
        if sr:
            med = (statistics.median(all_b) / statistics.median(all_a)) if all_a and all_b else float("nan")
            print(f"   b/a s/token: geomean {geomean(sr):.3f} (pairs {min(sr):.3f}..{max(sr):.3f}); "
                  f"cpu-s/token geomean {geomean(cr):.3f}; median token (all tokens) {med:.3f}")
        print()


if __name__ == "__main__":
    main()

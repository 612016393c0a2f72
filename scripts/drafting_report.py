#!/usr/bin/env python3
"""The table of scripts/bench-drafting.sh: per cache size and draft width N, what one verify
decode of 1 + N tokens costs (flash bytes, wall time, mean per decode) against N plain
decodes, and the per-draft acceptance a draft source must reach for the verify decode to pay.

usage: scripts/drafting_report.py OUT_DIR
Reads OUT_DIR/raw/c<MiB>-{plain,ngram<N>}-r<k>.csv (bmoe-cli --csv files). Stdlib only.

A verify decode carrying d drafts of which a are accepted confirms 1 + a tokens. Against plain
decodes at cost P each it pays when C_verify < (1 + a) * P, i.e. when the accepted fraction of
the drafts a / d exceeds (C_verify / P - 1) / d: the break-even acceptance printed per row (above
1.0 means no acceptance can pay). The first decode of each run is skipped (cold caches), and
rows are the decodes (`mtp_batch` >= 1).

The CSV does not mark which decodes verified drafts: a rejected draft's row has mtp_batch 1 like a
plain decode. So with coverage c = drafted_steps / mtp_decodes, the mean decode of a speculative
run is (1 - c) * P + c * V, and the verify decode's cost is estimated as
V = (mean - (1 - c) * P) / c with P the plain run's mean decode. The estimate is only as good as c
is large: a coverage below ~0.5 is flagged with `*`.
"""

import csv
import re
import statistics
import sys
from pathlib import Path


def read_run(path):
    """The decode rows (first skipped) and the `# summary` trailer of one metrics CSV."""
    lines = Path(path).read_text().splitlines()
    trailer = {}
    for line in lines:
        if line.startswith("# summary "):
            for kv in line[len("# summary "):].split():
                k, _, v = kv.partition("=")
                trailer[k] = v
    body = [line for line in lines if not line.startswith("#")]
    rows = [r for r in csv.DictReader(body)] if body else []
    rows = [r for r in rows if float(r.get("mtp_batch") or 0) >= 1]
    return rows[1:], trailer


def mean(rows, name):
    xs = []
    for r in rows:
        try:
            xs.append(float(r[name]))
        except (KeyError, ValueError):
            pass
    return statistics.fmean(xs) if xs else float("nan")


def num(trailer, key):
    try:
        return float(trailer[key])
    except (KeyError, ValueError):
        return float("nan")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/drafting_report.py OUT_DIR")
    raw = Path(sys.argv[1]) / "raw"
    runs = {}
    for p in sorted(raw.glob("*.csv")):
        m = re.fullmatch(r"c(\d+)-(plain|ngram(\d+))-r\d+\.csv", p.name)
        if not m:
            continue
        runs.setdefault(int(m.group(1)), {}).setdefault(int(m.group(3) or 0), []).append(read_run(p))
    if not runs:
        sys.exit(f"error: no c<MiB>-*-r<k>.csv files in {raw}\nhint: run scripts/bench-drafting.sh first")
    print("cache_mib  N  drafts/verify  coverage  accept  verify_MiB  verify_ms  N×plain_MiB  N×plain_ms  "
          "verify/plain_ms  break-even_accept")
    for cache in sorted(runs):
        plain = runs[cache].get(0, [])
        prow = [r for rows, _ in plain for r in rows]
        p_ms, p_mib = mean(prow, "wall_ms"), mean(prow, "read_bytes") / 2**20
        for n in sorted(k for k in runs[cache] if k > 0):
            got = runs[cache][n]
            rows = [r for rs, _ in got for r in rs]
            tot = lambda k: sum(num(t, k) for _, t in got)
            steps, decodes = tot("drafted_steps"), tot("mtp_decodes")
            drafted, accepted = tot("mtp_drafted"), tot("mtp_accepted")
            d = drafted / steps if steps else float("nan")
            c = steps / decodes if decodes else float("nan")
            verify = lambda m, p: (m - (1 - c) * p) / c if c else float("nan")
            v_ms = verify(mean(rows, "wall_ms"), p_ms)
            v_mib = verify(mean(rows, "read_bytes") / 2**20, p_mib)
            ratio = v_ms / p_ms if p_ms else float("nan")
            be = (ratio - 1) / d if d else float("nan")
            flag = "*" if not c >= 0.5 else " "
            print(f"{cache:9d} {n:2d} {d:14.2f} {c:8.2f}{flag} "
                  f"{accepted / drafted if drafted else float('nan'):7.2f} {v_mib:11.1f} {v_ms:10.1f} "
                  f"{n * p_mib:12.1f} {n * p_ms:11.1f} {ratio:16.2f} {be:18.2f}")


if __name__ == "__main__":
    main()

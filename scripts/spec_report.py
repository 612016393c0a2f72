#!/usr/bin/env python3
"""What speculation cost and bought in a scripts/bench-speculation.sh run: per variant directory
and configuration, the mean over pairs of flash MiB/token (the per-token `read_bytes` column,
speculative reads included), the speculative share of those bytes (trailer `spec_read_MiB`
over the run's read bytes), the useful fraction (`spec_useful / spec_experts`), the cache hit
rate (trailer `cache_hit_pct`) and, for route-ahead, the agreement with the router (trailer
`ra_agree_pct`) and the adoption wait (trailer `adopt_s/tok`), for the runs without speculation
(a) and with it (b). Then the `moe-predict:` lines of OUT_DIR/predict-log/run.out, when present.

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
    hit = float(trailer.get("cache_hit_pct", -1) or -1)
    agree = trailer.get("ra_agree_pct")
    adopt = trailer.get("adopt_s/tok")
    return (
        mib_tok,
        (spec / total if total > 0 else 0.0),
        (useful / experts if experts else None),
        hit,
        float(agree) if agree not in (None, "") else None,
        float(adopt) if adopt not in (None, "") else None,
    )


def mean_or_dash(values, fmt):
    vs = [v for v in values if v is not None]
    return fmt(statistics.mean(vs)) if vs else "-"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/spec_report.py OUT_DIR")
    out = Path(sys.argv[1])
    print(
        f"{'variant':<12} {'config':<10} {'run':<4} {'MiB/tok':>9} {'spec share':>10} "
        f"{'useful':>8} {'hit':>6} {'agree':>7} {'adopt s/t':>9}"
    )
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
            useful = mean_or_dash((r[2] for r in rs), lambda x: f"{100 * x:.1f}%")
            hit = mean_or_dash((r[3] for r in rs), lambda x: f"{x:.1f}%")
            agree = mean_or_dash((r[4] for r in rs), lambda x: f"{x:.1f}%")
            adopt = mean_or_dash((r[5] for r in rs), lambda x: f"{x:.3f}")
            print(
                f"{d.name:<12} {cfg:<10} {v:<4} {mib:>9.1f} {100 * share:>9.1f}% "
                f"{useful:>8} {hit:>6} {agree:>7} {adopt:>9}"
            )
    log = out / "predict-log" / "run.out"
    if log.is_file():
        print()
        print(f"predictor accuracy ({log.relative_to(out)}):")
        for line in log.read_text().splitlines():
            if line.startswith("moe-predict:"):
                print(line)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The tables of scripts/bench-drafting.sh (issue #17's drafting benchmark).

Route traces may be stored gzipped (<name>.route.csv.gz), as bench-data keeps them.

usage: scripts/drafting_report.py OUT_DIR
Reads OUT_DIR/raw/c<cache>-traced-d<N>.{csv,route.csv} and c<cache>-<a|b>-p<pair>.csv.

A verify decode's width (1 + its drafts) is not in the metrics CSV, so it is recovered from the
route trace: a decode routes positions p..p+W-1 in one batch; it confirms g = mtp_batch of them,
and the next decode starts at p+g. A rejected draft's position is therefore routed twice, and
that is the only way a run of ascending positions falls back. Stdlib only.
"""

import csv
import gzip
import math
import re
import statistics
import sys
from pathlib import Path


def read_csv(path):
    """Per-token rows (dicts) of a bmoe-cli --csv file."""
    with open(path, newline="") as f:
        body = [l for l in f.read().splitlines() if not l.startswith("#")]
    return list(csv.DictReader(body)) if body else []


def groups(rows):
    """One (g, wall_ms, read_bytes, cpu_ms) per decode: rows with mtp_batch >= 1 (a group's
    whole cost is on its first row; followers carry mtp_batch = 0)."""
    out = []
    for r in rows:
        g = int(float(r["mtp_batch"]))
        if g >= 1:
            out.append((g, float(r["wall_ms"]), float(r["read_bytes"]), float(r["cpu_ms"])))
    return out


def widths(route_path, gs):
    """Each decode's width from the route trace (decode-phase rows of the first MoE layer, slot
    0, in file order) and the decodes' group sizes `gs`."""
    steps, first_layer = [], None
    packed = route_path.with_name(route_path.name + ".gz")
    if not route_path.exists() and packed.exists():
        with gzip.open(packed, "rt", newline="") as f:
            text = f.read()
    else:
        with open(route_path, newline="") as f:
            text = f.read()
    body = [l for l in text.splitlines() if not l.startswith("#")]
    rows = list(csv.DictReader(body))
    for r in rows:
        if r["phase"] == "1":
            layer = int(r["layer"])
            first_layer = layer if first_layer is None else min(first_layer, layer)
    for r in rows:
        if r["phase"] == "1" and int(r["layer"]) == first_layer and r["slot"] == "0":
            steps.append(int(r["step"]))
    out, k = [], 0
    for g in gs:
        if k >= len(steps):
            raise SystemExit(f"{route_path}: fewer routed positions than decodes")
        p = steps[k]
        run = 1
        while k + run < len(steps) and steps[k + run] == p + run:
            run += 1
        falls_back = k + run < len(steps) and steps[k + run] == p + g
        w = run if (run > g and falls_back) else g
        if k + w == len(steps) and run > g:
            w = run  # the last decode: rejected drafts are not routed again
        out.append(w)
        k += w
    if k != len(steps):
        raise SystemExit(f"{route_path}: {len(steps) - k} routed positions left over")
    return out


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def break_even(r, n):
    """Per-draft acceptance p at which 1 + p + ... + p^n tokens per verify decode equal the
    cost ratio r of that decode (i.i.d. acceptance); None when even p = 1 does not pay."""
    if r <= 1:
        return 0.0
    if r > n + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(n + 1)) < r:
            lo = mid
        else:
            hi = mid
    return lo


def s_per_token(rows):
    toks = sum(int(float(r["mtp_batch"])) for r in rows) or len(rows)
    return sum(float(r["wall_ms"]) for r in rows) / 1000 / toks, sum(
        float(r["cpu_ms"]) for r in rows) / 1000 / toks


def median_token(rows):
    per = []
    for g, wall, _, _ in groups(rows):
        per += [wall / g] * g
    return statistics.median(per) if per else float("nan")


def main():
    out = Path(sys.argv[1])
    raw = out / "raw"
    caches = sorted({int(m.group(1)) for p in raw.glob("c*-*.csv")
                     if (m := re.match(r"c(\d+)-", p.name))})
    print(f"# drafting cost — {out}")
    for c in caches:
        print(f"\n## cache {c} MiB\n")
        print("| run | width | decodes | MiB/decode | × width 1 | wall ms/decode | × width 1 | "
              "cpu ms/decode | break-even acceptance (bytes / wall) |")
        print("|---|---|---|---|---|---|---|---|---|")
        traced = sorted((p for p in raw.glob(f"c{c}-traced-d*.csv")
                         if re.search(r"-d\d+\.csv$", p.name)),
                        key=lambda p: int(re.search(r"d(\d+)\.csv$", p.name).group(1)))
        b_widths = {}
        for t in traced:
            n = int(re.search(r"d(\d+)\.csv$", t.name).group(1))
            gs = groups(read_csv(t))
            ws = widths(t.with_name(t.stem + ".route.csv"), [g for g, *_ in gs])
            b_widths[n] = (ws, [g for g, *_ in gs])
            by = {}
            for w, (g, wall, rb, cpu) in zip(ws, gs):
                by.setdefault(w, []).append((wall, rb, cpu))
            base = by.get(1)
            for w in sorted(by):
                xs = by[w]
                mib = mean([x[1] for x in xs]) / 2**20
                wall = mean([x[0] for x in xs])
                cpu = mean([x[2] for x in xs])
                if base and w > 1:
                    rb = mib / (mean([x[1] for x in base]) / 2**20)
                    rw = wall / mean([x[0] for x in base])
                    be_s = " / ".join(
                        "never" if be is None else f"{be * 100:.0f} %"
                        for be in (break_even(rb, w - 1), break_even(rw, w - 1)))
                    print(f"| {t.stem} | {w} | {len(xs)} | {mib:.1f} | {rb:.2f} | {wall:.0f} | "
                          f"{rw:.2f} | {cpu:.0f} | {be_s} |")
                else:
                    print(f"| {t.stem} | {w} | {len(xs)} | {mib:.1f} | 1 | {wall:.0f} | 1 | "
                          f"{cpu:.0f} | |")
        pairs = sorted({int(m.group(1)) for p in raw.glob(f"c{c}-a-p*.csv")
                        if (m := re.search(r"-p(\d+)\.csv$", p.name))})
        if not pairs:
            continue
        print("\n| pair | plain s/tok | ngram s/tok | B/A | plain CPU-s/tok | ngram CPU-s/tok | "
              "B/A | B median token / A |")
        print("|---|---|---|---|---|---|---|---|")
        ratios, cratios = [], []
        for p in pairs:
            a, b = raw / f"c{c}-a-p{p}.csv", raw / f"c{c}-b-p{p}.csv"
            if not (a.exists() and b.exists()):
                continue
            ra, rb_ = read_csv(a), read_csv(b)
            (sa, ca), (sb, cb) = s_per_token(ra), s_per_token(rb_)
            ratios.append(sb / sa)
            cratios.append(cb / ca)
            mt = median_token(rb_) / median_token(ra)
            print(f"| {p} | {sa:.3f} | {sb:.3f} | {sb / sa:.3f} | {ca:.3f} | {cb:.3f} | "
                  f"{cb / ca:.3f} | {mt:.3f} |")
            # the untraced B runs make the same decodes as the traced run of the same N
            nmax = max(b_widths) if b_widths else None
            if nmax is not None:
                ws, gs_traced = b_widths[nmax]
                gs_b = [g for g, *_ in groups(rb_)]
                same = gs_b == gs_traced
                print(f"|   | decodes {len(gs_b)} | {'same' if same else 'DIFFERENT'} groups as "
                      f"the traced d{nmax} run | | | | | |")
        if ratios:
            g = math.exp(mean([math.log(x) for x in ratios]))
            gc = math.exp(mean([math.log(x) for x in cratios]))
            print(f"\ngeomean s/token B/A {g:.3f}, CPU-s/token B/A {gc:.3f} over {len(ratios)} pairs")


if __name__ == "__main__":
    main()

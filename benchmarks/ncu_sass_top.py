"""Print the most-sampled SASS instructions of an Nsight Compute source-page CSV (warp-state sampling), with each
one's share of all samples and, where the CSV has them, its top stall reasons.

    ncu -i rep.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 benchmarks/ncu_sass_top.py sass.csv [--top 40]
"""

from __future__ import annotations

import argparse
import csv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    with open(args.csv) as fh:
        rows = list(csv.reader(fh))
    head = next(i for i, r in enumerate(rows) if "Source" in r)
    cols = rows[head]
    key = next(c for c in cols if c.startswith("Warp Stall Sampling (All"))
    src, ks = cols.index("Source"), cols.index(key)
    body = [r for r in rows[head + 1:] if len(r) == len(cols)]
    tot = sum(float(r[ks] or 0) for r in body) or 1.0
    print(f"{len(body)} SASS instructions, {tot:.0f} samples")
    for r in sorted(body, key=lambda r: -float(r[ks] or 0))[: args.top]:
        print(f"{100 * float(r[ks] or 0) / tot:6.2f}%  {r[src][:110]}")


if __name__ == "__main__":
    main()

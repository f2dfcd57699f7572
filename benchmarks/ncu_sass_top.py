"""Print the most-sampled SASS instructions of an Nsight Compute source-page CSV (warp-state sampling), with each
one's share of all samples and its top stall reasons; with ``--blocks``, the kernel's stall reasons over all samples
and per block of instructions executed equally often (a loop body: the quad loop, the per-tile code, the epilogue).

    ncu -i rep.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 benchmarks/ncu_sass_top.py sass.csv [--top 40] [--blocks 3]
"""

from __future__ import annotations

import argparse
import collections
import csv
import lzma
import re


def _num(v: str) -> float:
    return float(v or 0)


def _opcode(source: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", source.strip()).split(" ")[0]


def _reasons(row: dict, names: list[str], top: int = 3) -> str:
    total = sum(_num(row[n]) for n in names) or 1.0
    best = sorted(((_num(row[n]), n) for n in names), reverse=True)[:top]
    return " ".join(f"{n.removeprefix('stall_')}:{100 * v / total:.0f}" for v, n in best if v > 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="the source page as CSV (.xz accepted)")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--blocks", type=int, default=0, help="also the N most executed instruction blocks")
    args = ap.parse_args()
    opener = lzma.open if args.csv.endswith(".xz") else open
    with opener(args.csv, "rt") as fh:
        rows = list(csv.reader(fh))
    head = next(i for i, r in enumerate(rows) if "Source" in r)
    cols = rows[head]
    body = [dict(zip(cols, r, strict=True)) for r in rows[head + 1:] if len(r) == len(cols)]
    key = next(c for c in cols if c.startswith("Warp Stall Sampling (All"))
    names = [c for c in cols if c.startswith("stall_") and "Not Issued" not in c]
    tot = sum(_num(r[key]) for r in body) or 1.0
    print(f"{len(body)} SASS instructions, {tot:.0f} samples")
    for r in sorted(body, key=lambda r: -_num(r[key]))[: args.top]:
        print(f"{100 * _num(r[key]) / tot:6.2f}%  {r['Source'][:70]:70s} {_reasons(r, names)}")
    if args.blocks and names:
        every = {n: sum(_num(r[n]) for r in body) for n in names}
        print("whole kernel:", _reasons(every, names, top=8))
        counts = collections.Counter(r["Instructions Executed"] for r in body if _num(r["Instructions Executed"]))
        for count, size in sorted(counts.items(), key=lambda c: -_num(c[0]) * c[1])[: args.blocks]:
            block = [r for r in body if r["Instructions Executed"] == count]
            share = sum(_num(r[key]) for r in block) / tot
            ops = collections.Counter(_opcode(r["Source"]) for r in block).most_common(5)
            sums = {n: sum(_num(r[n]) for r in block) for n in names}
            print(f"block of {size} instructions x {count}: {100 * share:.1f}% of samples; {dict(ops)}")
            print("   ", _reasons(sums, names, top=7))


if __name__ == "__main__":
    main()

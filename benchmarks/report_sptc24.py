"""Markdown table from a bench_sptc24 JSON result; the README's 2:4 table is this script's output.

    python3 benchmarks/report_sptc24.py benchmarks/results/h100/sptc24_llm.json > benchmarks/results/h100/sptc24_llm.md
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

COLUMNS = [("cublas", "cuBLAS ms"), ("cusparselt_default", "cuSPARSELt"), ("cusparselt_search", "cuSPARSELt+search"),
           ("torch_semi_structured", "torch semi-structured"), ("sptc24_sm90_heuristic", "**sptc24_sm90**"),
           ("sptc24_sm80_heuristic", "sptc24_sm80"), ("sptc24_sm90_sweep", "sm90 best of sweep"),
           ("sptc24_sm90_tuned", "**sptc24_sm90 tuned**")]


def table(result: dict) -> str:
    env = result["environment"]
    by = defaultdict(dict)
    for r in result["rows"]:
        if "median_ms" not in r:
            continue
        key = (r["m"], r["n"], r["k"])
        prev = by[key].get(r["impl"])
        if prev is None or r["median_ms"] < prev["median_ms"]:
            by[key][r["impl"]] = r
    present = {impl for row in by.values() for impl in row}
    columns = [c for c in COLUMNS if c[0] in present]  # only what this run timed
    tuned = ("sptc24_sm90_tuned" in present) * (" Tuned: the tuning DB's winner for the shape (from earlier "
                                                 "sweeps), re-timed in this run; the heuristic column is untuned.")
    lines = [f"2:4 SpMM, {env['gpu']}, {env.get('cutlass')} CUTLASS, torch {env['torch']}, driver {env['driver']}, "
             f"commit {env['commit']}. Speedup over cuBLAS dense fp16 timed in the same run "
             "(median of CUDA-graph replays over inputs rotated past L2). Untuned: heuristic configs." + tuned, "",
             "| m x n x k | " + " | ".join(c[1] for c in columns) + " |",
             "|---" * (len(columns) + 1) + "|"]
    for key in sorted(by, key=lambda s: (-s[0], -s[1])):
        row = by[key]
        cells = []
        for impl, _ in columns:
            r = row.get(impl)
            if r is None:
                cells.append("—")
            elif impl == "cublas":
                cells.append(f"{r['median_ms']:.3f}")
            else:
                cells.append(f"{row['cublas']['median_ms'] / r['median_ms']:.2f}x")
        lines.append(f"| {key[0]} x {key[1]} x {key[2]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(table(json.load(f)))

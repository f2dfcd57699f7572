"""Markdown from a ``bench_sptc24.py --grid pipe`` run: CUTLASS's sparse mainloop against ours, per shape and kernel.

    python3 benchmarks/report_pipe.py benchmarks/results/h100/sptc24_pipe.json > benchmarks/results/h100/sptc24_pipe.md

Per shape: cuBLAS time, cuSPARSELt after mm_search, and the best sweep point of each mainloop (speedup over cuBLAS,
ratio to cuSPARSELt). Per kernel (tile, cluster, scheduler; best over its raster/swizzle points): ours over CUTLASS's.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def kernel_of(cfg: dict) -> str:
    return (f"{cfg['tile_m']}x{cfg['tile_n']}x{cfg['tile_k']} c{cfg['cluster_m']}x{cfg['cluster_n']} "
            f"{cfg['scheduler']}")


def main() -> None:
    with open(sys.argv[1]) as f:
        data = json.load(f)
    env = data["environment"]
    rows = [r for r in data["rows"] if "median_ms" in r]
    shapes = sorted({(r["m"], r["n"], r["k"]) for r in rows}, key=lambda s: (-s[0] * s[1] * s[2]))
    print(f"# sptc24_sm90: CUTLASS's sparse mainloop (mma_pipe 0) vs ours (mma_pipe 1)\n\n{env['gpu']}, driver "
          f"{env['driver']}, {env['nvcc']}, commit {env['commit']}, {env['date']}\n\n`{env['command']}`\n")
    print("| m x n x k | cuBLAS ms | cuSPARSELt | best mma_pipe 0 | best mma_pipe 1 | pipe 1 / cuSPARSELt |")
    print("|---|---|---|---|---|---|")
    per_kernel: dict[str, list[float]] = defaultdict(list)
    for s in shapes:
        mine = [r for r in rows if (r["m"], r["n"], r["k"]) == s]
        cub = next(r["median_ms"] for r in mine if r["impl"] == "cublas")
        cs = next((r["median_ms"] for r in mine if r["impl"] == "cusparselt_search"), None)
        sweep = [r for r in mine if r["impl"] == "sptc24_sm90_sweep"]
        best = {p: min((r for r in sweep if r["config"].get("mma_pipe", 0) == p), key=lambda r: r["median_ms"])
                for p in (0, 1)}
        cs_txt = f"{cub / cs:.2f}x" if cs else "n/a"
        ratio = f"{cs / best[1]['median_ms']:.3f}" if cs else "n/a"
        print(f"| {'x'.join(map(str, s))} | {cub:.4f} | {cs_txt} | {cub / best[0]['median_ms']:.2f}x "
              f"({kernel_of(best[0]['config'])}) | {cub / best[1]['median_ms']:.2f}x ({kernel_of(best[1]['config'])}) "
              f"| {ratio} |")
        by_kernel: dict[tuple[str, int], float] = {}
        for r in sweep:
            key = (kernel_of(r["config"]), r["config"].get("mma_pipe", 0))
            by_kernel[key] = min(by_kernel.get(key, float("inf")), r["median_ms"])
        for (kern, pipe), t in by_kernel.items():
            if pipe == 1 and (kern, 0) in by_kernel:
                per_kernel[kern].append(by_kernel[(kern, 0)] / t)
    print("\n| kernel | ours over CUTLASS's mainloop: geomean (min - max) over shapes |\n|---|---|")
    for kern, ratios in sorted(per_kernel.items(), key=lambda kv: -statistics.geometric_mean(kv[1])):
        print(f"| {kern} | {statistics.geometric_mean(ratios):.3f} ({min(ratios):.3f} - {max(ratios):.3f}) |")


if __name__ == "__main__":
    main()

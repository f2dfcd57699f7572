"""PNG plots from a bench_sptc24 JSON: speedup over cuBLAS per shape and implementation, and a roofline.

    python3 benchmarks/plot_sptc24.py benchmarks/results/h100/sptc24_llm.json   # writes *_speedup.png, *_roofline.png
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

IMPLS = {"cusparselt_search": "cuSPARSELt (mm_search)", "torch_semi_structured": "torch semi-structured",
         "sptc24_sm90_heuristic": "cutlass_nm sptc24_sm90", "sptc24_sm80_heuristic": "cutlass_nm sptc24_sm80"}
PEAK_TFLOPS, BANDWIDTH_TBS = 1400.0, 3.0  # 2:4 peak (2 x measured dense cuBLAS), measured copy bandwidth


def best_rows(result: dict) -> dict[tuple, dict[str, dict]]:
    by: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in result["rows"]:
        if "median_ms" in r:
            key, prev = (r["m"], r["n"], r["k"]), by[(r["m"], r["n"], r["k"])].get(r["impl"])
            if prev is None or r["median_ms"] < prev["median_ms"]:
                by[key][r["impl"]] = r
    return by


def plot(path: Path) -> list[Path]:
    result = json.loads(path.read_text())
    by = best_rows(result)
    shapes = sorted(by, key=lambda s: (-s[0], -s[1]))
    env = result["environment"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(IMPLS)
    for i, (impl, label) in enumerate(IMPLS.items()):
        vals = [by[s]["cublas"]["median_ms"] / by[s][impl]["median_ms"] if impl in by[s] else 0 for s in shapes]
        ax.bar([x + i * width for x in range(len(shapes))], vals, width, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(2.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(shapes))], [f"{m}x{n}x{k}" for m, n, k in shapes],
                  rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("speedup over cuBLAS dense (same run)")
    ax.set_title(f"2:4 SpMM fp16, {env['gpu']} (commit {env['commit']}); dashed: ideal 2x")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out1 = path.with_name(path.stem + "_speedup.png")
    fig.savefig(out1, dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for impl, label in IMPLS.items():
        pts = []
        for (m, n, k), rows in by.items():
            if impl in rows:
                bytes_ = m * k * 2 + n * k * 2 * (9 / 16) + m * n * 2  # x, compressed W + metadata, y
                pts.append((2.0 * m * n * k / bytes_, rows[impl]["tflops"]))
        if pts:
            ax.scatter(*zip(*pts, strict=True), label=label, s=18)
    xs = [2 ** i for i in range(0, 13)]
    ax.plot(xs, [min(PEAK_TFLOPS, BANDWIDTH_TBS * x) for x in xs], "k-", lw=1, label="roofline (2:4 peak, copy BW)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (dense-equivalent flop / byte moved)")
    ax.set_ylabel("dense-equivalent TFLOP/s")
    ax.set_title("2:4 SpMM roofline")
    ax.legend(fontsize=7)
    fig.tight_layout()
    out2 = path.with_name(path.stem + "_roofline.png")
    fig.savefig(out2, dpi=110)
    plt.close(fig)
    return [out1, out2]


if __name__ == "__main__":
    for p in plot(Path(sys.argv[1])):
        print("wrote", p)

"""PNG plots from a ``cutlass-nm bench`` result JSON (matplotlib: the ``bench`` extra).

* ``<stem>_speedup.png``: speedup over cuBLAS against sparsity, one line per family (geomean over the
  shapes, bars from min to max), for m > 16 and for decode (m <= 16), with the ideal 1 / (1 - sparsity).
* ``<stem>_roofline.png``: effective TFLOP/s (nonzero flops) against arithmetic intensity (nonzero flops
  per byte moved), with the tensor-core, CUDA-core and bandwidth roofs of ``bench.roofline``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .report import DECODE_M, label, summary_rows

MARKERS = "osD^v<>ph*"


def plot_speedup(result: dict, path: Path) -> Path:
    env = result["environment"]
    summary = [s for s in summary_rows(result) if s["vs_cublas"] and s["impl"] != "cuBLAS SGEMM (fp32, TF32 off)"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    for ax, reg in zip(axes, (f"m > {DECODE_M}", f"m ≤ {DECODE_M}"), strict=True):
        lines: dict[str, list[dict]] = defaultdict(list)
        for s in summary:
            if s["regime"] == reg:
                lines[s["impl"]].append(s)
        for i, (impl, pts) in enumerate(sorted(lines.items())):
            pts.sort(key=lambda s: s["sparsity"])
            xs = [100 * s["sparsity"] for s in pts]
            ys = [s["vs_cublas"] for s in pts]
            # clamped: with one shape the geomean equals min and max up to rounding
            err = [[max(0.0, y - s["vs_cublas_min"]) for y, s in zip(ys, pts, strict=True)],
                   [max(0.0, s["vs_cublas_max"] - y) for y, s in zip(ys, pts, strict=True)]]
            ax.errorbar(xs, ys, yerr=err, marker=MARKERS[i % len(MARKERS)], capsize=3, label=impl)
        grid = [50 + i * 0.5 for i in range(0, 91)]
        ax.plot(grid, [1 / (1 - g / 100) for g in grid], "k--", lw=0.8, label="ideal 1 / (1 − sparsity)")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_yscale("log")
        ax.set_xlabel("sparsity (%)")
        ax.set_title(f"{reg}")
        ax.legend(fontsize=7)
    axes[0].set_ylabel(f"speedup over cuBLAS dense {result.get('suite', {}).get('dtype', 'f16')} (same run)")
    fig.suptitle(f"N:M SpMM, {env['gpu']} (commit {env['commit']}): geomean over shapes, bars min–max", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_roofline(result: dict, path: Path) -> Path:
    model = result.get("model", {})
    rates = model.get("rates_flops", {"tensor": 7e14, "simt": 6.7e13})
    bw = model.get("bandwidth_Bps", 3e12)
    fig, ax = plt.subplots(figsize=(7.5, 5))
    pts: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in result["rows"]:
        if r.get("gbps") and r.get("tflops_effective"):
            pts[label(r)].append((r["tflops_effective"] * 1e3 / r["gbps"], r["tflops_effective"]))
    for i, (name, xy) in enumerate(sorted(pts.items())):
        ax.scatter(*zip(*xy, strict=True), s=16, marker=MARKERS[i % len(MARKERS)], label=name)
    xs = [2 ** (i / 4) for i in range(-8, 4 * 13)]
    for engine, style in (("tensor", "k-"), ("simt", "k:")):
        ax.plot(xs, [min(rates[engine], bw * x) / 1e12 for x in xs], style, lw=1,
                label=f"roof: {engine} {rates[engine] / 1e12:.0f} TFLOP/s, {bw / 1e12:.1f} TB/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (nonzero flop / byte moved)")
    ax.set_ylabel("effective TFLOP/s (nonzero flops)")
    ax.set_title(f"Roofline, {result['environment']['gpu']}", fontsize=10)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(result: dict, stem: Path) -> list[Path]:
    return [plot_speedup(result, stem.with_name(stem.name + "_speedup.png")),
            plot_roofline(result, stem.with_name(stem.name + "_roofline.png"))]

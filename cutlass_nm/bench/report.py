"""Markdown from a ``cutlass-nm bench`` result JSON: the headline table (the README's) and every row.

No GPU and no torch needed: this runs in CI to check the README against the committed JSON.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

DECODE_M = 16  # rows with m <= this are the decode regime (the nm_decode family's range)
BASELINE_LABELS = {"cublas": "cuBLAS dense", "cublas_sgemm": "cuBLAS SGEMM (fp32, TF32 off)",
                   "cusparselt_search": "cuSPARSELt 2:4 (mm_search)"}


def _geo(vals: list[float]) -> float | None:
    vals = [v for v in vals if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v else "—"


def regime(row: dict) -> str:
    return f"m ≤ {DECODE_M}" if row["m"] <= DECODE_M else f"m > {DECODE_M}"


def label(row: dict) -> str:
    name = row.get("family") or BASELINE_LABELS.get(row["impl"], row["impl"])
    return f"{name}, x padded to {row['padded_m']} rows" if row.get("padded_m") else name


def header(result: dict) -> str:
    env = result["environment"]
    return (f"{env['gpu']}, CUTLASS {env.get('cutlass')}, torch {env['torch']}, driver {env['driver']}, "
            f"commit {env['commit']}, {env.get('date', '')[:10]}; `{env['command']}`. Speedups are over baselines "
            f"timed in the same run (median of CUDA-graph replays over inputs rotated past L2); % of ideal is "
            f"against `bench.roofline.ideal_ms` (nonzero flops at the engine's rate, or bytes at copy bandwidth).")


def summary_rows(result: dict) -> list[dict]:
    """One row per (regime, implementation, pattern): geomean speedups over the shapes it ran."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    order: list[tuple] = []
    for r in result["rows"]:
        if "median_ms" not in r or r["impl"] == "cublas":
            continue
        key = (regime(r), label(r), r.get("pattern") or "dense")
        if key not in groups:
            order.append(key)
        groups[key].append(r)
    base_first = sorted(order, key=lambda k: (k[0] != f"m > {DECODE_M}", groups[k][0].get("family") is not None,
                                              order.index(k) if groups[k][0].get("family") is None else 0,
                                              k[1], groups[k][0].get("sparsity") or 0, k[2]))
    out = []
    for key in base_first:
        rows = groups[key]
        vs = [r.get("speedup_vs_cublas") for r in rows if r.get("speedup_vs_cublas")]
        tuned = sum(bool(r.get("tuned")) for r in rows)
        ideal = [r["pct_of_ideal"] for r in rows if r.get("pct_of_ideal")]
        out.append({"regime": key[0], "impl": key[1], "pattern": key[2], "sparsity": rows[0].get("sparsity") or 0.0,
                    "shapes": len(rows), "vs_cublas": _geo(vs), "vs_cublas_min": min(vs, default=None),
                    "vs_cublas_max": max(vs, default=None),
                    "vs_cusparselt": _geo([r.get("speedup_vs_cusparselt") for r in rows]),
                    "vs_sgemm": _geo([r.get("speedup_vs_sgemm") for r in rows]),
                    "pct_of_ideal": statistics.median(ideal) if ideal else 0.0,
                    "config": "—" if not rows[0].get("family") else (f"tuned {tuned}/{len(rows)}" if tuned
                                                                    else "heuristic")})
    return out


def headline_table(result: dict) -> str:
    """The README's table: per regime, implementation and pattern, geomean speedups over the run's shapes."""
    dtype = {"f16": "fp16", "bf16": "bf16"}.get(result.get("suite", {}).get("dtype", "f16"), "fp16")
    lines = [f"| m | implementation | pattern | sparsity | shapes | vs cuBLAS {dtype}: geomean (min–max) | "
             "vs cuSPARSELt 2:4 | vs cuBLAS SGEMM | % of ideal (median) | config |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary_rows(result):
        span = f" ({s['vs_cublas_min']:.2f}–{s['vs_cublas_max']:.2f})" if s["vs_cublas"] else ""
        lines.append(f"| {s['regime']} | {s['impl']} | {s['pattern']} | {s['sparsity']:.1%} | {s['shapes']} | "
                     f"{_x(s['vs_cublas'])}{span} | {_x(s['vs_cusparselt'])} | {_x(s['vs_sgemm'])} | "
                     f"{s['pct_of_ideal']:.0f} % | {s['config']} |")
    return "\n".join(lines)


def rows_table(result: dict) -> str:
    """Every row, shape by shape."""
    lines = ["| shape | m x n x k | implementation | pattern | config | median ms (p20–p80) | vs cuBLAS | "
             "vs cuSPARSELt | vs SGEMM | % ideal | TFLOP/s dense-eq. / effective | GB/s | rel. error |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        cfg = "—" if not r.get("family") else ("tuned" if r.get("tuned") else "heuristic")
        head = (f"| {r.get('name') or ''} | {r['m']} x {r['n']} x {r['k']} | {label(r)} | {r.get('pattern') or 'dense'}"
                f" | {cfg} |")
        if "median_ms" not in r:
            lines.append(f"{head} error: {r.get('error', '?')[:120].replace('|', '/')} |" + " |" * 7)
            continue
        lines.append(f"{head} {r['median_ms']:.4f} ({r['p20_ms']:.4f}–{r['p80_ms']:.4f}) | "
                     f"{_x(r.get('speedup_vs_cublas'))} | {_x(r.get('speedup_vs_cusparselt'))} | "
                     f"{_x(r.get('speedup_vs_sgemm'))} | {r.get('pct_of_ideal', 0):.0f} % | "
                     f"{r.get('tflops', 0):.1f} / {r.get('tflops_effective', 0):.1f} | {r.get('gbps', 0):.0f} | "
                     f"{r.get('rel_err', float('nan')):.1e} |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    """The results file: header, headline table, every row, and what was skipped."""
    parts = [header(result), "", headline_table(result), "", "All rows:", "", rows_table(result)]
    skipped = result.get("skipped") or []
    if skipped:
        reasons: dict[tuple[str, str], int] = defaultdict(int)
        for sk in skipped:
            reasons[(sk["family"], sk["reason"])] += 1
        parts += ["", "Skipped (family: reason, shapes):", ""]
        parts += [f"- {fam}: {why} ({count})" for (fam, why), count in sorted(reasons.items())]
    return "\n".join(parts)

"""Regenerate the README's result tables from the committed results (they are never typed by hand).

    python3 benchmarks/update_readme.py          # rewrite README.md in place (and redraw the suite's plot)
    python3 benchmarks/update_readme.py --check  # exit 1 if README.md is out of date (a CPU test runs this)

Each table sits between ``<!-- results:NAME -->`` and ``<!-- /results:NAME -->`` markers and comes from one JSON
under benchmarks/results/ in ``cutlass-nm bench``'s format (``{"environment": ..., "rows": [...]}``):
``suite`` from h100/suite_quick.json, ``sptc24`` from h100/sptc24_interleaved.json, ``tuner`` from h100/tuner.json,
``heldout`` from h100/heldout_sptc24.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SUITE = RESULTS / "h100" / "suite_quick.json"


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v else "—"


def env_line(env: dict) -> str:
    return (f"{env['gpu']}, driver {env['driver']}, CUTLASS {env.get('cutlass')}, torch {env['torch']}, "
            f"{env.get('date', '')[:10]}")


def suite_section(result: dict) -> str:
    """``cutlass-nm bench --quick``: per implementation and pattern, geomean speedups in both regimes, and the plot."""
    from cutlass_nm.bench.report import DECODE_M, summary_rows

    rows: dict[tuple[str, str], dict] = {}
    for s in summary_rows(result):
        rows.setdefault((s["impl"], s["pattern"]), {"sparsity": s["sparsity"]})[s["regime"]] = s
    big, small = f"m > {DECODE_M}", f"m ≤ {DECODE_M}"
    lines = [f"{env_line(result['environment'])}; `cutlass-nm bench --quick` with the shipped tuning records. "
             f"Geomean over the run's shapes (min–max) of the speedup over cuBLAS fp16 timed in the same run.", "",
             f"| implementation | pattern | vs cuBLAS, {big} | vs cuBLAS, {small} | vs cuSPARSELt, {big} | "
             f"vs cuBLAS SGEMM, {big} |", "|---|---|---|---|---|---|"]
    for (impl, pattern), r in rows.items():
        cells = []
        for reg in (big, small):
            s = r.get(reg)
            cells.append("—" if not s or not s["vs_cublas"] else
                         f"{s['vs_cublas']:.2f}x ({s['vs_cublas_min']:.2f}–{s['vs_cublas_max']:.2f})")
        cells += [_x(r[big]["vs_cusparselt"]) if big in r else "—", _x(r[big]["vs_sgemm"]) if big in r else "—"]
        lines.append(f"| {impl} | {pattern} | " + " | ".join(cells) + " |")
    plot = SUITE.with_name(SUITE.stem + "_speedup.png").relative_to(ROOT)
    return "\n".join(lines) + f"\n\n![speedup against sparsity]({plot})"


def sptc24_section(result: dict) -> str:
    """2:4 in interleaved rounds against cuBLAS and cuSPARSELt (``interleave_sptc24.py``)."""
    shapes: dict[tuple[int, int, int], dict[str, dict]] = {}
    for r in result["rows"]:
        shapes.setdefault((r["m"], r["n"], r["k"]), {})[r["impl"]] = r
    lines = [f"{env_line(result['environment'])}; `interleave_sptc24.py --preset accept --rounds 5 --min-m 1024`. "
             "Per shape, 5 rounds of every implementation in rotating order; speedups are medians of per-round "
             "ratios. Tuned: the tuning records shipped then (before the shipping grid).", "",
             "| m x n x k | cuBLAS ms | cuSPARSELt | sptc24_sm90 heuristic | sptc24_sm90 tuned | tuned / cuSPARSELt |",
             "|---|---|---|---|---|---|"]
    for (m, n, k), impls in sorted(shapes.items(), key=lambda s: (-s[0][0], -s[0][1] * s[0][2])):
        tuned = impls.get("sptc24_sm90_tuned", impls["sptc24_sm90_heuristic"])
        lines.append(f"| {m} x {n} x {k} | {impls['cublas']['median_ms']:.3f} | "
                     f"{impls['cusparselt_search']['speedup_vs_cublas']:.2f}x | "
                     f"{impls['sptc24_sm90_heuristic']['speedup_vs_cublas']:.2f}x | "
                     f"{tuned['speedup_vs_cublas']:.2f}x | {tuned['speedup_vs_cusparselt']:.3f} |")
    return "\n".join(lines)


def heldout_section(result: dict) -> str:
    """The default path (no user DB) on the held-out models' shapes against cuSPARSELt and cuBLAS, per m."""
    import math

    shapes: dict[tuple[int, int, int], dict[str, dict]] = {}
    for r in result["rows"]:
        shapes.setdefault((r["m"], r["n"], r["k"]), {})[r["impl"]] = r
    per_m: dict[int, list[tuple[float, float, float, str]]] = {}
    for (m, _, _), impls in shapes.items():
        ours = next(v for k, v in impls.items() if k.startswith("sptc24_sm90"))
        cslt, dense = impls["cusparselt_search"]["median_ms"], impls["cublas"]["median_ms"]
        per_m.setdefault(m, []).append((cslt / ours["median_ms"], dense / ours["median_ms"], dense / cslt,
                                        ours["config_source"]))

    def geo(v: list[float]) -> float:
        return math.exp(sum(math.log(x) for x in v) / len(v))

    lines = [f"{env_line(result['environment'])}; `cutlass-nm bench --split held_out --family sptc24_sm90` "
             "with no tuning DB: 14 layer shapes of 3 held-out models, every config from the config model.", "",
             "| m | shapes | vs cuSPARSELt: geomean (min-max) | rows ≥ 0.97x cuSPARSELt "
             "| vs cuBLAS: geomean (min-max) | cuSPARSELt vs cuBLAS |", "|---|---|---|---|---|---|"]
    for m, rows in sorted(per_m.items()):
        vs_c, vs_d, c_d = ([r[i] for r in rows] for i in range(3))
        lines.append(f"| {m} | {len(rows)} | {geo(vs_c):.2f}x ({min(vs_c):.2f}-{max(vs_c):.2f}) | "
                     f"{sum(v >= 0.97 for v in vs_c)} / {len(rows)} | "
                     f"{geo(vs_d):.2f}x ({min(vs_d):.2f}-{max(vs_d):.2f}) | "
                     f"{geo(c_d):.2f}x |")
    everything = [r[0] for rows in per_m.values() for r in rows]
    lines.append(f"| all | {len(everything)} | {geo(everything):.3f}x ({min(everything):.2f}-{max(everything):.2f}) | "
                 f"{sum(v >= 0.97 for v in everything)} / {len(everything)} | | |")
    return "\n".join(lines)


def tuner_section(result: dict) -> str:
    """Optuna against the exhaustive sweep of a sub-space (``bench_tuner.py``)."""
    lines = [f"{env_line(result['environment'])}; `bench_tuner.py`.", "",
             "| m x n x k | space points | trials (measured / pruned) | Optuna time / sweep-best time | vs cuBLAS | "
             "vs cuSPARSELt |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if r["impl"] != "sptc24_sm90_optuna":
            continue
        lines.append(f"| {r['m']} x {r['n']} x {r['k']} | {r['space_points']} | {r['optuna_trials']} "
                     f"({r['optuna_measured']} / {r['optuna_pruned']}) | {r['optuna_over_sweep']:.3f} | "
                     f"{r['speedup_vs_cublas']:.2f}x | {r['speedup_vs_cusparselt_best']:.2f}x |")
    return "\n".join(lines)


SECTIONS = {
    "suite": (SUITE, suite_section),
    "sptc24": (RESULTS / "h100" / "sptc24_interleaved.json", sptc24_section),
    "tuner": (RESULTS / "h100" / "tuner.json", tuner_section),
    "heldout": (RESULTS / "h100" / "heldout_sptc24.json", heldout_section),
}
OPTIONAL = {"suite"}  # skipped where a README has no markers for it


def render(readme: str, sections: dict = SECTIONS) -> str:
    for name, (path, fn) in sections.items():
        pattern = re.compile(rf"(<!-- results:{name} -->\n)(?:.*?\n)?(<!-- /results:{name} -->)", re.S)
        if not pattern.search(readme):
            if name in OPTIONAL:
                continue
            raise SystemExit(f"README.md has no <!-- results:{name} --> section")
        body = fn(json.loads(path.read_text()))
        readme = pattern.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), readme)
    return readme


def redraw_suite() -> None:
    """The suite's markdown and speedup plot again (PNG bytes vary by matplotlib, so --check skips this)."""
    from cutlass_nm.bench.report import markdown

    result = json.loads(SUITE.read_text())
    SUITE.with_suffix(".md").write_text(markdown(result) + "\n")
    try:
        from cutlass_nm.bench.plots import plot_speedup
    except ImportError as exc:  # matplotlib is the `bench` extra
        print(f"plot not redrawn ({exc})")
        return
    plot_speedup(result, SUITE.with_name(SUITE.stem + "_speedup.png"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only check; exit 1 if README.md is out of date")
    args = ap.parse_args()
    path = ROOT / "README.md"
    old = path.read_text()
    new = render(old)
    if args.check:
        return 0 if new == old else 1
    path.write_text(new)
    redraw_suite()
    return 0


if __name__ == "__main__":
    sys.exit(main())

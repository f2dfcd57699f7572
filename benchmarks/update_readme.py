"""Regenerate the README's result tables from the committed JSON (they are never typed by hand).

    python3 benchmarks/update_readme.py          # rewrite README.md in place
    python3 benchmarks/update_readme.py --check  # exit 1 if README.md is out of date (a CPU test runs this)

Each table sits between ``<!-- results:NAME -->`` and ``<!-- /results:NAME -->`` markers. The ``suite``
section (``cutlass-nm bench``'s headline table and speedup plot, from results/h100/suite.json, else
suite_quick.json) is optional:
it is filled where README.md has its markers; rewriting (not --check) also redraws the suite's PNGs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from report_sptc24 import table as sptc24_table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def tuner_table(result: dict) -> str:
    env = result["environment"]
    lines = [f"{env['gpu']}, commit {env['commit']}; `{env['command']}`.", "",
             "| problem | space points | Optuna trials (measured / pruned) | Optuna best / sweep best | "
             "tuned vs cuBLAS | tuned vs best cuSPARSELt |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['m']} x {r['n']} x {r['k']} | {r['space_points']} | {r['optuna_trials']} "
                     f"({r['optuna_measured']} / {r['optuna_pruned']}) | {r['optuna_over_sweep']:.3f} | "
                     f"{r['optuna_speedup_vs_cublas']:.2f}x | {r['optuna_speedup_vs_cusparselt_best']:.2f}x |")
    return "\n".join(lines)


def interleaved_table(result: dict) -> str:
    """2:4 against cuBLAS and cuSPARSELt from a ``benchmarks/interleave_sptc24.py`` run."""
    env = result["environment"]
    lines = [f"2:4 SpMM, {env['gpu']}, driver {env['driver']}, CUTLASS {env.get('cutlass')}, torch {env['torch']}, "
             f"commit {env['commit']}; `{env['command']}`. Per shape, 5 rounds of every implementation in rotating "
             "order (CUDA-graph replays over inputs rotated past L2, 200 ms warm-up each); speedups are medians of "
             "per-round ratios. Heuristic: untuned; tuned: the winner in the shipped tuning DB of that commit "
             "(`db/records/h100-80gb-hbm3.jsonl`).", "",
             "| m x n x k | cuBLAS ms | cuSPARSELt (mm_search) | **sptc24_sm90** heuristic | **sptc24_sm90** tuned "
             "| tuned / cuSPARSELt | tuned config |", "|---|---|---|---|---|---|---|"]
    for r in sorted(result["rows"], key=lambda r: (-r["m"], -r["n"] * r["k"])):
        c = r["configs"].get("sptc24_sm90_tuned", r["configs"]["sptc24_sm90_heuristic"])
        cfg = (f"{c['tile_m']}x{c['tile_n']}x{c['tile_k']} c{c['cluster_m']}x{c['cluster_n']} {c['scheduler']}, "
               f"raster {c['raster']}, swizzle {c['swizzle']}, mma_pipe {c.get('mma_pipe', 0)}")
        lines.append(f"| {r['m']} x {r['n']} x {r['k']} | {r['median_ms']['cublas']:.3f} | "
                     f"{r['cusparselt_vs_cublas']:.2f}x | {r['sptc24_sm90_heuristic_vs_cublas']:.2f}x | "
                     f"{r.get('sptc24_sm90_tuned_vs_cublas', float('nan')):.2f}x | "
                     f"{r.get('sptc24_sm90_tuned_over_cusparselt', float('nan')):.3f} | {cfg} |")
    return "\n".join(lines)


# the full run's JSON where committed, else the --quick run's
SUITE = next((p for p in (RESULTS / "h100" / "suite.json", RESULTS / "h100" / "suite_quick.json") if p.exists()),
             RESULTS / "h100" / "suite.json")


def suite_section(result: dict) -> str:
    """The README's headline: ``cutlass-nm bench``'s summary table and its speedup plot."""
    from cutlass_nm.bench.report import header, headline_table

    plot = SUITE.with_name(SUITE.stem + "_speedup.png").relative_to(ROOT)
    return f"{header(result)}\n\n{headline_table(result)}\n\n![speedup against sparsity]({plot})"


SECTIONS = {
    "sptc24": (RESULTS / "h100" / "sptc24_llm.json", sptc24_table),
    "sptc24_interleaved": (RESULTS / "h100" / "sptc24_interleaved_final.json", interleaved_table),
    "tuner": (RESULTS / "h100" / "tuner.json", tuner_table),
    "suite": (SUITE, suite_section),
}
OPTIONAL = {"suite"}  # filled only where README.md has the markers


def render(readme: str, sections: dict = SECTIONS) -> str:
    for name, (path, fn) in sections.items():
        pattern = re.compile(rf"(<!-- results:{name} -->\n)(?:.*?\n)?(<!-- /results:{name} -->)", re.S)
        if not pattern.search(readme) or (name in OPTIONAL and not path.exists()):
            if name in OPTIONAL:
                continue
            raise SystemExit(f"README.md has no <!-- results:{name} --> section")
        body = fn(json.loads(path.read_text()))
        readme = pattern.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), readme)
    return readme


def redraw_suite() -> None:
    """The suite's markdown and PNGs again from its JSON (PNG bytes vary by matplotlib, so --check skips this)."""
    if SUITE.exists():
        from cutlass_nm.bench.suite import write_reports

        write_reports(json.loads(SUITE.read_text()), SUITE.with_suffix(""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
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

"""Per-config time ratios between two bench_nm_simt.py results (a new kernel against an old one, across runs).

    python3 benchmarks/compare_sweeps.py OLD.json NEW.json

Every (pattern, shape, config) both sweeps timed gives new / old; the ratios are grouped by pattern and config (CTA
tile, k-tile, stages, split, split_reduce) and summarized (median, min, max). The cuBLAS SGEMM times of shapes both
runs have give the same ratio as a control: a drift of the GPU between the runs shows there first.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def _load(path: Path) -> tuple[dict, dict]:
    """(SGEMM ms by shape, sweep ms by (pattern, shape, config))."""
    rows = json.loads(path.read_text())["rows"]
    sgemm, timed = {}, {}
    for r in rows:
        shape = (r["m"], r["n"], r["k"])
        if r["impl"].startswith("cublas"):
            sgemm[shape] = r["median_ms"]
            continue
        for entry in r.get("sweep") or []:
            timed[(r["pattern"], shape, tuple(sorted(entry["config"].items())))] = entry["median_ms"]
    return sgemm, timed


def _label(config: tuple) -> str:
    c = dict(config)
    return (f"{c['block_rows']}x{c['block_tokens']} {c['thread_rows']}x{c['thread_tokens']} k{c['k_cols']} "
            f"s{c['stages']} split{c['split_k']} r{c['split_reduce']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    args = ap.parse_args()
    sgemm_old, old = _load(args.old)
    sgemm_new, new = _load(args.new)
    control = [sgemm_new[s] / sgemm_old[s] for s in sgemm_new if s in sgemm_old]
    if control:
        print(f"cuBLAS SGEMM new / old over {len(control)} shapes: median {statistics.median(control):.4f}, "
              f"{min(control):.3f}-{max(control):.3f}")
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for key, ms in new.items():
        if key in old:
            groups[(key[0], _label(key[2]))].append(ms / old[key])
    print("| pattern | config | rows | new / old median | min | max |\n|---|---|---|---|---|---|")
    for (pattern, label), ratios in sorted(groups.items()):
        print(f"| {pattern} | {label} | {len(ratios)} | {statistics.median(ratios):.3f} | {min(ratios):.3f} | "
              f"{max(ratios):.3f} |")


if __name__ == "__main__":
    main()

"""Plots of a result JSON in ``cutlass-nm bench``'s format: speedup against sparsity, and a roofline.

    python3 benchmarks/plot_results.py benchmarks/results/h100/suite_quick.json            # both PNGs beside it
    python3 benchmarks/plot_results.py results.json --which speedup --out-dir /tmp/plots

Reads ``{"environment": ..., "rows": [...]}`` (``cutlass-nm bench``, ``interleave_sptc24.py``); needs matplotlib
(``pip install -e ".[bench]"``). The README's plot is redrawn by ``update_readme.py`` the same way.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result", type=Path, help="result JSON ({environment, rows})")
    ap.add_argument("--which", choices=["speedup", "roofline", "both"], default="both", help="which plot(s)")
    ap.add_argument("--out-dir", type=Path, help="folder for the PNGs (default: beside the JSON)")
    args = ap.parse_args()
    from cutlass_nm.bench.plots import plot_roofline, plot_speedup

    result = json.loads(args.result.read_text())
    stem = (args.out_dir or args.result.parent) / args.result.stem
    stem.parent.mkdir(parents=True, exist_ok=True)
    if args.which in ("speedup", "both"):
        print(plot_speedup(result, stem.with_name(stem.name + "_speedup.png")))
    if args.which in ("roofline", "both"):
        print(plot_roofline(result, stem.with_name(stem.name + "_roofline.png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())

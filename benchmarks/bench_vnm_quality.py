"""How much weight magnitude V:N:M pruning keeps, against unstructured magnitude pruning at the same
sparsity, and how close the fast column choice is to the exact one (issue 5, format part).

    python3 benchmarks/bench_vnm_quality.py --out benchmarks/results/cpu/vnm_quality.json

Weights: Gaussian 1024 x 4096 (seeded), a stand-in for a trained layer.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from cutlass_nm.bench.env import environment
from cutlass_nm.formats.vnm import EXACT_LIMIT, kept_fraction, mask_vnm, unstructured_kept_fraction
from cutlass_nm.patterns import Pattern

PATTERNS = ["128:2:4", "128:2:7", "128:2:8", "128:2:10", "128:2:16", "64:2:8", "32:2:8", "128:2:20", "128:2:32"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    w = torch.randn(1024, 4096, generator=torch.Generator().manual_seed(0))
    rows = []
    for pat in PATTERNS:
        p = Pattern.parse(pat)
        t0 = time.time()
        fast = kept_fraction(w, mask_vnm(w, p, exact=False))
        fast_s = time.time() - t0
        exact = None
        if p.m <= 16:
            t0 = time.time()
            exact = kept_fraction(w, mask_vnm(w, p, exact=True))
            exact_s = time.time() - t0
        row = {"pattern": pat, "sparsity": 1 - p.density, "unstructured": unstructured_kept_fraction(w, p.density),
               "vnm_fast": fast, "fast_s": fast_s, "vnm_exact": exact, "exact_s": exact_s if exact else None}
        rows.append(row)
        print(f"{pat:>9}  sparsity {row['sparsity']:.3f}  unstructured {row['unstructured']:.4f}  "
              f"V:N:M fast {fast:.4f}" + (f"  exact {exact:.4f}  fast/exact {fast / exact:.5f}" if exact else ""))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": environment(), "exact_limit_subsets": EXACT_LIMIT,
                                        "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

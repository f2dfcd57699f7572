"""cuBLAS SGEMM on the compacted problem: what issue 6's "% of ideal" reads for a sparse kernel that gathered for
free and ran as well as cuBLAS does on a dense problem of the same work.

An N:M-sparse (m, n, k) product does the multiply-adds of a dense (m, n, k·N/M) one over the same output tiles, with
a k-loop N/M as long. This times cuBLAS SGEMM (TF32 off) at (m, n, k) and at (m, n, k·N/M) in the same run, on
NM-SpMM's 20 LLaMA shapes, and reports the compacted product's speedup as a fraction of the ideal M/N, the figure
the acceptance asks of nm_simt (>= 90 % at every level):

    python3 benchmarks/bench_compacted_sgemm.py --out benchmarks/results/h100/compacted_sgemm.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from cutlass_nm.bench.env import environment
from cutlass_nm.bench.timing import copies_to_rotate, time_rotating

TOKENS = (256, 512, 1024, 2048, 4096)
NK = ((4096, 4096), (12288, 4096), (11008, 4096), (4096, 11008))
LEVELS = {"50 %": 1 / 2, "62.5 %": 3 / 8, "75 %": 1 / 4, "87.5 %": 1 / 8}


def sgemm_ms(m: int, n: int, k: int, reps: int) -> float:
    """Median ms of cuBLAS SGEMM (m, k) x (k, n) over input sets rotated past L2."""
    copies = copies_to_rotate(4 * (m * k + n * k + m * n))
    xs = [torch.randn(m, k, device="cuda") for _ in range(copies)]
    ws = [torch.randn(n, k, device="cuda") for _ in range(copies)]
    ys = [torch.empty(m, n, device="cuda") for _ in range(copies)]
    return time_rotating(lambda i: torch.mm(xs[i], ws[i].T, out=ys[i]), copies, reps=reps, warmup_ms=50).p50_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="JSON file for the rows and the per-level means")
    ap.add_argument("--reps", type=int, default=30, help="graph replays per timing (median taken)")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    start = time.time()
    rows = []
    for n, k in NK:
        for m in TOKENS:
            full = sgemm_ms(m, n, k, args.reps)
            for level, density in LEVELS.items():
                kc = round(k * density)
                t = sgemm_ms(m, n, kc, args.reps)
                rows.append({"m": m, "n": n, "k": k, "level": level, "k_compacted": kc, "full_ms": full,
                             "compacted_ms": t, "pct_of_ideal": 100 * full / t * density})
                print(json.dumps(rows[-1]), flush=True)
    summary = {level: statistics.mean(r["pct_of_ideal"] for r in rows if r["level"] == level) for level in LEVELS}
    by_tokens = {level: {m: statistics.mean(r["pct_of_ideal"] for r in rows if r["level"] == level and r["m"] == m)
                         for m in TOKENS} for level in LEVELS}
    args.out.write_text(json.dumps({"environment": environment(), "tf32": False, "rows": rows, "summary": summary,
                                    "by_tokens": by_tokens, "wall_s": time.time() - start}, indent=1))
    for level in LEVELS:
        print(f"{level:>7}: cuBLAS SGEMM on the compacted problem, mean {summary[level]:.1f} % of ideal; by tokens "
              + " / ".join(f"{v:.1f}" for v in by_tokens[level].values()))


if __name__ == "__main__":
    main()

"""The LLaMA-7B MLP in prefill, dense against 128:2:8 with gate and up fused (SparseGatedMLP), in alternating
rounds (each a median of CUDA-graph replays of one MLP call, as bench_llama_block times it): the median and spread
of the per-round ratios, so that run-to-run drift of either side does not decide the figure.

    python3 benchmarks/ab_glu_mlp.py --rounds 7 --out benchmarks/results/h100/ab_glu_mlp.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from bench_llama_block import MLP, time_ms

from cutlass_nm.families import KernelTypes, Problem, get_family
from cutlass_nm.kernels import precompile
from cutlass_nm.nn import SparseGatedMLP


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batches", default="1,4", help="prefill batches of 2048 tokens")
    ap.add_argument("--pattern", default="128:2:8")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    dim, hidden, dt = 4096, 11008, torch.float16
    batches = [int(b) for b in args.batches.split(",")]
    types = KernelTypes("f16", "f16", False)
    sm90 = get_family("vnm_sm90")
    kids = {("vnm_glu_sm90", get_family("vnm_glu_sm90").Config(), types)}
    kids |= {("vnm_sm90", sm90.heuristic(Problem(b * 2048, dim, hidden, types, args.pattern)), types) for b in batches}
    print("precompile failures:", [r for r in precompile(sorted(kids, key=str)) if isinstance(r, Exception)])
    torch.manual_seed(0)
    dense = MLP(dim, hidden).cuda().to(dt).eval()
    sparse = SparseGatedMLP.from_linears(dense.gate_proj, dense.up_proj, dense.down_proj, args.pattern).eval()
    rows = []
    with torch.inference_mode():
        for b in batches:
            x = torch.randn(b, 2048, dim, device="cuda", dtype=dt)
            ratios, pairs = [], []
            for r in range(args.rounds):
                order = (dense, sparse) if r % 2 == 0 else (sparse, dense)
                t = {id(m): time_ms(lambda m=m, x=x: m(x)) for m in order}
                pairs.append((t[id(dense)], t[id(sparse)]))
                ratios.append(t[id(dense)] / t[id(sparse)])
            row = {"batch": b, "tokens": 2048, "pattern": args.pattern + "+glu", "rounds": args.rounds,
                   "dense_ms": [p[0] for p in pairs], "sparse_ms": [p[1] for p in pairs],
                   "mlp_speedup_median": statistics.median(ratios), "mlp_speedup_min": min(ratios),
                   "mlp_speedup_max": max(ratios)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        from cutlass_nm.bench.env import environment

        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

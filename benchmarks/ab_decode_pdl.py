"""The LLaMA-7B block's decode step (one token, batch 1) sparsified to 128:2:8, with the decode path launched with
programmatic dependent launch (the heuristic) and without it, alternating in one process: does PDL, which lets a
GEMV's weight stream start while the kernel before it finishes, pay off between the block's other kernels?

    python3 benchmarks/ab_decode_pdl.py --out benchmarks/results/h100/ab_decode_pdl.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path

import torch
from bench_llama_block import Block, time_ms
from bench_nm_decode import no_pdl

import cutlass_nm
from cutlass_nm.bench.env import environment
from cutlass_nm.nn import sparsify


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--pattern", default="128:2:8")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    torch.manual_seed(0)
    dense = Block(4096, 11008, 32).cuda().half().eval()
    sparse = sparsify(copy.deepcopy(dense), args.pattern, include=["*_proj"])
    x = torch.randn(1, 1, 4096, device="cuda", dtype=torch.float16)
    times = {"pdl": {"mlp": [], "block": []}, "no_pdl": {"mlp": [], "block": []}}
    with torch.inference_mode():
        for _ in range(args.rounds):
            for name, selector in (("pdl", None), ("no_pdl", no_pdl)):
                cutlass_nm.set_selector(selector)
                times[name]["mlp"].append(time_ms(lambda: sparse.mlp(x), reps=50))
                times[name]["block"].append(time_ms(lambda: sparse(x), reps=50))
        cutlass_nm.set_selector(None)
    summary = {name: {part: statistics.median(v) for part, v in t.items()} for name, t in times.items()}
    print(json.dumps(summary))
    if args.out:
        args.out.write_text(json.dumps({"environment": environment(), "pattern": args.pattern, "times_ms": times,
                                        "median_ms": summary}, indent=1))


if __name__ == "__main__":
    main()

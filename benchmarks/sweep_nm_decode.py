"""Sweep the decode family's configs (warps, rows per warp) per token count on the GPU, against cuBLAS fp16
timed in the same run: the data behind ``nm_decode``'s heuristic.

    python3 benchmarks/sweep_nm_decode.py --out benchmarks/results/h100/nm_decode_sweep.json
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
from pathlib import Path

import torch
from bench_nm_decode import decode_inputs, same_bytes_copy

import cutlass_nm
from cutlass_nm.bench.env import environment
from cutlass_nm.bench.timing import time_rotating
from cutlass_nm.dispatch import set_selector
from cutlass_nm.families import KernelTypes, get_family
from cutlass_nm.families.nm_decode import MAX_FIXED, fixed_smem
from cutlass_nm.kernels import get_kernel, precompile

SHAPES = [(4096, 4096), (11008, 4096), (8192, 8192)]
PATTERNS = ["2:8", "16:32"]
TOKENS = [1, 4, 8, 16]
WARPS, ROWS, STAGE, AHEAD, TRANSPOSE = (4, 8, 16), (1, 2, 4, 8), (0, 1), (1, 2, 4), (0, 1)
MODES, MODE_AHEAD, BULK, SPLIT, PDL = (0,), (2, 4, 8), (0,), (0,), (0,)


def configs(tokens: int) -> list:
    """The sweep's configs for ``tokens``: the mode 0 grid (lanes along k), and for modes 1 and 2 (one row per
    lane, tensor cores) warps x ahead (x bulk for mode 2); each x split x pdl (launch options)."""
    fam = get_family("nm_decode")
    out = []
    if 0 in MODES:
        for warps, rows, stage, ahead, tr in itertools.product(WARPS, ROWS, STAGE, AHEAD, TRANSPOSE):
            cfg = fam.Config(max_tokens=tokens, warps=warps, rows=rows, stage_x=stage, ahead=ahead, transpose=tr)
            if rows * tokens <= 64 and not (tokens > 1 and stage) and not (tr and rows > 4):
                out.append(cfg)
    out += [fam.Config(max_tokens=tokens, warps=warps, ahead=ahead, mode=mode, bulk=bulk)
            for mode, warps, ahead, bulk in itertools.product((m for m in MODES if m), WARPS, MODE_AHEAD, BULK)
            if not (bulk and mode != 2)]
    out = [dataclasses.replace(c, split=split, pdl=pdl) for c in out for split in SPLIT for pdl in PDL]
    return [c for c in out if fixed_smem(c) <= MAX_FIXED]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES), help="NxK,NxK,...")
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--stage", default="0,1", help="stage_x values to sweep")
    ap.add_argument("--ahead", default="1,2,4", help="ahead values to sweep")
    ap.add_argument("--transpose", default="0,1", help="transpose values to sweep (one token)")
    ap.add_argument("--warps", default="4,8,16")
    ap.add_argument("--rows", default="1,2,4,8")
    ap.add_argument("--modes", default="0", help="0 = lanes along k, 1 = one row per lane, 2 = tensor cores")
    ap.add_argument("--mode-ahead", default="2,4,8", help="ahead values of the mode 1 and 2 configs")
    ap.add_argument("--bulk", default="0", help="mode 2's value stream: 0 = registers, 1 = TMA bulk rings")
    ap.add_argument("--split", default="0", help="CTAs per cluster along k (0 = the plan's rule)")
    ap.add_argument("--pdl", default="0", help="programmatic dependent launch: 0, 1")
    ap.add_argument("--vector", type=int, default=1, help="rows sharing kept positions (the N:M format's vector)")
    args = ap.parse_args()
    global WARPS, ROWS, STAGE, AHEAD, TRANSPOSE, MODES, MODE_AHEAD, BULK, SPLIT, PDL
    WARPS, ROWS, STAGE, AHEAD, TRANSPOSE, MODES, MODE_AHEAD, BULK, SPLIT, PDL = (
        tuple(int(v) for v in a.split(",")) for a in (args.warps, args.rows, args.stage, args.ahead, args.transpose,
                                                     args.modes, args.mode_ahead, args.bulk, args.split, args.pdl))
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    patterns, tokens = args.patterns.split(","), [int(t) for t in args.tokens.split(",")]
    types = KernelTypes("f16", "f16", False)
    # split is a launch argument: one binary per config without it
    precompile(list({("nm_decode", dataclasses.replace(c, split=0), types) for t in tokens for c in configs(t)}))
    rows = []
    env = environment()
    for (n, k), m in itertools.product(shapes, tokens):
        copies, xs, t_dense = decode_inputs(m, n, k)
        for pattern in patterns:
            ws = [cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16), pattern,
                                   vector=args.vector)[0] for _ in range(copies)]
            nbytes = ws[0].values.numel() * 2 + ws[0].indices.numel() + (m * k + m * n) * 2
            t_copy = same_bytes_copy(nbytes, copies, reps=50)  # the ceiling at this size
            ref = xs[0].float() @ ws[0].to_dense().float().T
            for cfg in configs(m):
                set_selector(lambda fam, prob, cfg=cfg: cfg)
                err = float((cutlass_nm.matmul(xs[0], ws[0]).float() - ref).norm() / ref.norm())
                t = time_rotating(lambda i, xs=xs, ws=ws: cutlass_nm.matmul(xs[i], ws[i]), copies, reps=50,
                                  warmup_ms=50)
                launch = get_kernel(("nm_decode", cfg, types)).occupancy(xs[0], ws[0])
                rows.append({"n": n, "k": k, "m": m, "pattern": pattern, "vector": args.vector,
                             "config": cfg.to_record(), "launch": launch,
                             "median_ms": t.p50_ms, "cublas_ms": t_dense, "speedup_vs_cublas": t_dense / t.p50_ms,
                             "bytes": nbytes, "same_bytes_copy_ms": t_copy,
                             "effective_tb_s": nbytes / t.p50_ms / 1e9, "rel_err": err})
            best = min((r for r in rows if (r["n"], r["k"], r["m"], r["pattern"]) == (n, k, m, pattern)),
                       key=lambda r: r["median_ms"])
            print(json.dumps(best), flush=True)
            del ws
            if args.out:  # after every pattern: a run cut short keeps what it measured
                args.out.write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    set_selector(None)


if __name__ == "__main__":
    main()

"""Where vnm_sm90's time goes, on one shape: the kernel as is, with a contiguous gather (no scatter in the rows
read), with every V-block reading the same rows (maximal L2 sharing), and the transpose alone.

    python3 benchmarks/profile_vnm.py [--cfg 128x256x64x4x2] [--once]
"""

from __future__ import annotations

import argparse

import torch
from bench_vnm import random_vnm

from cutlass_nm.bench.timing import time_rotating
from cutlass_nm.families import FAMILIES, KernelTypes
from cutlass_nm.families.vnm_sm90 import kernel_layout
from cutlass_nm.kernels import get_kernel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", default="128x256x64x4x2")
    ap.add_argument("--mnk", default="4096x4096x4096")
    ap.add_argument("--pattern", default="128:2:8")
    ap.add_argument("--once", action="store_true", help="one warm launch, then one launch (for ncu)")
    args = ap.parse_args()
    names = ("tile_m", "tile_n", "tile_k", "stages", "consumers")
    cfg = FAMILIES["vnm_sm90"].Config(**dict(zip(names, map(int, args.cfg.split("x")), strict=True)))
    m, n, k = map(int, args.mnk.split("x"))
    run = get_kernel(("vnm_sm90", cfg, KernelTypes("f16", "f16", False)))
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    y = torch.empty(m, n, device="cuda", dtype=torch.float16)
    w = random_vnm(n, k, args.pattern)
    if args.once:
        run(x, w, None, y)
        torch.cuda.synchronize()
        run(x, w, None, y)
        torch.cuda.synchronize()
        return
    key = next(iter(w.__dict__.get("_layouts", {})), None) or ("vnm_sm90", run.atom)
    values, e, gidx = kernel_layout(w, run.atom)
    variants = {"as is": gidx,
                "contiguous rows": torch.where(gidx >= 0, torch.arange(gidx.shape[1], device="cuda",
                                                                       dtype=torch.int32) % w.padded_k, gidx),
                "same rows every block": gidx[:1].expand_as(gidx).contiguous()}
    for name, g in variants.items():
        w.__dict__["_layouts"] = {key: (values, e, g)}
        t = time_rotating(lambda i: run(x, w, None, y), 1, reps=50)
        print(f"{name:24s} {t.p50_ms:.4f} ms", flush=True)
    t = time_rotating(lambda i: x.t().contiguous(), 1, reps=50)
    print(f"{'transpose alone':24s} {t.p50_ms:.4f} ms", flush=True)
    dense = w.to_dense()
    t = time_rotating(lambda i: torch.nn.functional.linear(x, dense), 1, reps=50)
    print(f"{'cuBLAS dense':24s} {t.p50_ms:.4f} ms", flush=True)


if __name__ == "__main__":
    main()

"""V:N:M weights at decode sizes (m = 1-16): the decode path on sparse tensor cores (nm_decode mode 3, several
configs) against the decode path on CUDA cores (mode 0, the weight read as 2:M), the dispatch default and cuBLAS
fp16, all timed in one run (CUDA-graph replays, weights and inputs rotated past L2).

    python3 benchmarks/bench_vnm_decode.py --out benchmarks/results/h100/vnm_decode.json
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch
from bench_nm_decode import clone_weight, decode_inputs

import cutlass_nm
from cutlass_nm.bench.env import environment
from cutlass_nm.bench.timing import time_rotating
from cutlass_nm.families import KernelTypes, get_family
from cutlass_nm.formats.vnm import compress_vnm
from cutlass_nm.kernels import precompile

SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (8192, 8192)]
MODE3 = [(4, 2), (8, 2), (8, 4), (16, 2)]  # (warps, ahead)


def mode3_configs(m: int) -> list:
    cfg = get_family("nm_decode").Config
    return [cfg(max_tokens=8 if m <= 8 else 16, warps=w, ahead=a, mode=3, pdl=1) for w, a in MODE3]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--patterns", default="128:2:8,128:2:16")
    ap.add_argument("--tokens", default="1,4,16")
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    types = KernelTypes("f16", "f16", False)
    precompile([("nm_decode", c, types) for m in tokens for c in mode3_configs(m)])
    rows = []
    for (n, k), m in itertools.product(SHAPES, tokens):
        copies, xs, t_dense = decode_inputs(m, n, k)
        for pattern in args.patterns.split(","):
            first = compress_vnm(torch.randn(n, k, device="cuda", dtype=torch.float16), pattern, prune=True,
                                 exact=False)
            ws = [first] + [clone_weight(first) for _ in range(copies - 1)]
            ref = xs[0].double() @ first.to_dense().double().T
            row = {"n": n, "k": k, "m": m, "pattern": pattern, "cublas_ms": t_dense, "paths": {}}
            paths = [("default", None, None), ("mode0", "nm_decode", None)]
            paths += [(f"mode3_w{c.warps}_a{c.ahead}", "nm_decode", c) for c in mode3_configs(m)]
            for name, family, cfg in paths:
                cutlass_nm.set_selector(None if cfg is None else (lambda fam, prob, cfg=cfg: cfg))
                try:
                    y = cutlass_nm.matmul(xs[0], ws[0], family=family)
                    err = float((y.double() - ref).norm() / ref.norm())
                    call = lambda i, f=family, xs=xs, ws=ws: cutlass_nm.matmul(xs[i], ws[i], family=f)  # noqa: E731
                    t = time_rotating(call, copies, reps=50, warmup_ms=50).p50_ms
                finally:
                    cutlass_nm.set_selector(None)
                row["paths"][name] = {"ms": t, "speedup_vs_cublas": t_dense / t, "rel_err": err}
            rows.append(row)
            best3 = min((v["ms"], p) for p, v in row["paths"].items() if p.startswith("mode3"))
            print(n, k, m, pattern, f"cublas {t_dense * 1e3:.1f}",
                  " ".join(f"{p} {v['ms'] * 1e3:.1f}" for p, v in row["paths"].items()), f"best {best3[1]}",
                  flush=True)
            del ws
        if args.out:
            args.out.write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

"""vnm_glu_sm90 configs on LLaMA-7B's gate/up (m x 2·11008 x 4096), each timed against the two separate vnm_sm90
GEMMs it replaces (heuristic configs, each with its x transpose), in one run; ``--once`` runs one config twice
(for Nsight Compute).

    python3 benchmarks/sweep_glu.py --m 2048,8192 --patterns 128:2:8,128:2:16
    ncu -k regex:vnm_kernel --launch-skip 1 --launch-count 1 python3 benchmarks/sweep_glu.py --once '{}'
"""

from __future__ import annotations

import argparse
import json

import torch

import cutlass_nm
from cutlass_nm.bench.timing import copies_to_rotate, time_rotating
from cutlass_nm.families import KernelTypes, get_family
from cutlass_nm.formats.glu import fuse_glu
from cutlass_nm.kernels import get_kernel, precompile

F16 = KernelTypes("f16", "f16", False)
GLU = get_family("vnm_glu_sm90")
VARIANTS = [{}, {"mma_pipe": 1}, {"stages": 4}, {"tile_k": 128, "stages": 3},
            {"tile_k": 128, "stages": 3, "mma_pipe": 1}, {"tile_n": 64, "stages": 8}, {"producer": 0}]


def kid(variant: dict) -> tuple:
    return "vnm_glu_sm90", GLU.Config.from_record({**GLU.Config().to_record(), **variant}), F16


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", default="2048,8192")
    ap.add_argument("--patterns", default="128:2:8,128:2:16")
    ap.add_argument("--dims", default="4096,11008")
    ap.add_argument("--once", help="a variant (JSON): run it twice, untimed")
    ap.add_argument("--variants", help="a JSON list of variants to sweep instead of the default set")
    args = ap.parse_args()
    dim, hidden = (int(v) for v in args.dims.split(","))
    variants = [json.loads(args.once)] if args.once else json.loads(args.variants) if args.variants else VARIANTS
    print(f"precompiled, failures: {[r for r in precompile([kid(v) for v in variants]) if isinstance(r, Exception)]}",
          flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    for pattern in args.patterns.split(","):
        # nn.Linear's scale: gate outputs of O(1), as in a model (unscaled randn weights put 1 + exp(-g) past
        # fp32's range in a few % of elements, a case real activations do not reach)
        gate, up = (torch.randn(hidden, dim, device="cuda", dtype=torch.float16, generator=g) / dim**0.5
                    for _ in range(2))
        fused = fuse_glu(gate, up, pattern)
        g_w, _ = cutlass_nm.prune(gate, pattern)
        u_w, _ = cutlass_nm.prune(up, pattern)
        for m in (int(v) for v in args.m.split(",")):
            copies = copies_to_rotate(m * dim * 2)
            xs = [torch.randn(m, dim, device="cuda", dtype=torch.float16, generator=g) for _ in range(copies)]
            ht = torch.empty(hidden, -(-m // 8) * 8, device="cuda", dtype=torch.float16)
            if args.once:
                for _ in range(2):
                    get_kernel(kid(variants[0]))(xs[0], fused, None, ht)
                cutlass_nm.matmul(xs[0], g_w)
                torch.cuda.synchronize()
                continue
            def both(i, xs=xs, a=g_w, b=u_w):
                return cutlass_nm.matmul(xs[i], a), cutlass_nm.matmul(xs[i], b)

            two = time_rotating(both, copies, reps=30, warmup_ms=100.0).p50_ms
            row = {"pattern": pattern, "m": m, "two_gemms_ms": two}
            for v in variants:
                kern = get_kernel(kid(v))
                t = time_rotating(lambda i, kern=kern, xs=xs, ht=ht, w=fused: kern(xs[i], w, None, ht), copies, reps=30,
                                  warmup_ms=100.0).p50_ms
                row[json.dumps(v)] = t
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

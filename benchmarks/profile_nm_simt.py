"""Launch one nm_simt config on one problem a few times, for Nsight Compute to profile (no timing here).

    ncu --clock-control none -k regex:nm_simt_kernel --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \\
        python3 benchmarks/profile_nm_simt.py --mnk 2048x4096x4096 --pattern 16:32 \\
        --config '{"x_transposed": 1}'

``--breakdown N`` instead runs N calls under torch.profiler and prints each kernel's mean device time per call
(the x transpose, the GEMM, memsets), beside cuBLAS SGEMM (TF32 off) on the same problem: where a call's time goes.
"""

from __future__ import annotations

import argparse
import json

import torch

from cutlass_nm.bench.timing import kernel_breakdown
from cutlass_nm.families import KernelTypes, get_family
from cutlass_nm.formats.nm import compress_nm
from cutlass_nm.kernels import get_kernel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mnk", default="2048x4096x4096", help="MxNxK")
    ap.add_argument("--pattern", default="16:32")
    ap.add_argument("--vector", type=int, default=32)
    ap.add_argument("--config", default="{}", help="JSON: nm_simt Config fields that differ from the defaults")
    ap.add_argument("--breakdown", type=int, default=0, help="profile this many calls and print per-kernel times")
    args = ap.parse_args()
    m, n, k = (int(v) for v in args.mnk.split("x"))
    fam = get_family("nm_simt")
    cfg = fam.Config.from_record({**fam.Config().to_record(), **json.loads(args.config)})
    kern = get_kernel((fam.name, cfg, KernelTypes("f32", "f32", False)))
    x = torch.randn(m, k, device="cuda")
    w = compress_nm(torch.randn(n, k, device="cuda"), args.pattern, args.vector, prune=True)
    y = torch.empty(m, n, device="cuda")
    for _ in range(4):
        kern(x, w, None, y)
    torch.cuda.synchronize()
    if args.breakdown:
        print(json.dumps({"mnk": args.mnk, "pattern": args.pattern, "vector": args.vector, "config": cfg.to_record(),
                          **breakdown(lambda: kern(x, w, None, y), args.breakdown),
                          "sgemm": breakdown(lambda: torch.mm(x, w.to_dense().float().T, out=y), args.breakdown)}))


def breakdown(call, calls: int) -> dict:
    """Each kernel's mean device µs per call of ``call`` (TF32 off for the SGEMM reference), and their sum."""
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = kernel_breakdown(call, calls)
    return {"kernels": rows, "total_us": sum(r["us"] for r in rows)}


if __name__ == "__main__":
    main()

"""Launch one nm_decode config on one shape a few times, for Nsight Compute to profile (no timing here).

    ncu --clock-control none -k regex:nm_decode --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        python3 benchmarks/profile_nm_decode.py --shape 8192x8192 --m 1 --pattern 1:8 --config 1,16,1,0,1
"""

from __future__ import annotations

import argparse

import torch

import cutlass_nm
from cutlass_nm.dispatch import set_selector
from cutlass_nm.families import get_family


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="8192x8192", help="NxK")
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--pattern", default="1:8")
    ap.add_argument("--vector", type=int, default=1)
    ap.add_argument("--config", default="1,16,1,0,1", help="max_tokens,warps,rows,stage_x,ahead")
    args = ap.parse_args()
    n, k = (int(v) for v in args.shape.split("x"))
    fam = get_family("nm_decode")
    cfg = fam.Config(*(int(v) for v in args.config.split(",")))
    set_selector(lambda f, p: cfg)
    x = torch.randn(args.m, k, device="cuda", dtype=torch.float16)
    w = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16), args.pattern, vector=args.vector)[0]
    for _ in range(4):
        cutlass_nm.matmul(x, w)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

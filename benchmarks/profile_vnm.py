"""Where vnm_sm90's time goes, on one shape: the whole call, our per-call x transpose alone (both variants), the
kernel with a contiguous gather (no scatter in the rows read) and with every V-block reading the same rows (maximal
L2 sharing), torch's transpose and cuBLAS dense, all in one run.

    python3 benchmarks/profile_vnm.py [--cfg 128x256x64x5x2x1x1] [--mnk 4096x4096x4096] [--once]
"""

from __future__ import annotations

import argparse

import torch
from bench_vnm import config_record, random_vnm

from cutlass_nm.bench.timing import copies_to_rotate, time_rotating
from cutlass_nm.families import FAMILIES, KernelTypes
from cutlass_nm.families.vnm_sm90 import kernel_layout
from cutlass_nm.kernels import get_kernel, precompile


def transpose_exact(kern, x: torch.Tensor, padded_k: int) -> bool:
    """Our transpose into a NaN-poisoned xt equals x^T, zero past k and m."""
    m, k = x.shape
    xt = torch.full((padded_k, -(-m // 8) * 8), float("nan"), device=x.device, dtype=x.dtype)
    kern.transpose(x, padded_k, xt)
    return torch.equal(xt[:k, :m], x.t()) and not xt[k:].any().item() and not xt[:, m:].any().item()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", default="128x256x64x5x2x1x1")
    ap.add_argument("--mnk", default="4096x4096x4096")
    ap.add_argument("--pattern", default="128:2:8")
    ap.add_argument("--once", action="store_true", help="one warm launch, then one launch (for ncu)")
    args = ap.parse_args()
    Config = FAMILIES["vnm_sm90"].Config
    cfg = Config.from_record(config_record(Config, args.cfg))
    types = KernelTypes("f16", "f16", False)
    variants = {tr: Config.from_record({**cfg.to_record(), "transpose": tr}) for tr in (0, 1)}
    precompile([("vnm_sm90", c, types) for c in variants.values()])
    run = get_kernel(("vnm_sm90", cfg, types))
    m, n, k = map(int, args.mnk.split("x"))
    copies = copies_to_rotate(m * k * 4)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(copies)]
    y = torch.empty(m, n, device="cuda", dtype=torch.float16)
    w = random_vnm(n, k, args.pattern)
    if args.once:
        for _ in range(2):
            run(xs[0], w, None, y)
            torch.cuda.synchronize()
        return
    ldx = -(-m // 8) * 8
    xts = [torch.empty(w.padded_k, ldx, device="cuda", dtype=torch.float16) for _ in range(copies)]
    ideal = 2 * m * k * 2 / 3e12 * 1e3
    for tr, c in variants.items():
        kern = get_kernel(("vnm_sm90", c, types))
        t = time_rotating(lambda i, kern=kern: kern.transpose(xs[i], w.padded_k, xts[i]), copies, reps=50)
        gbs = 2 * m * k * 2 / (t.p50_ms * 1e-3) / 1e9
        print(f"{'our transpose ' + str(tr):24s} {t.p50_ms:.4f} ms  {gbs:.0f} GB/s  (3 TB/s ideal {ideal:.4f} ms)",
              flush=True)
        tails = all(transpose_exact(kern, torch.randn(mt, kt, device="cuda", dtype=torch.float16), pk)
                    for mt, kt, pk in ((1, 256, 256), (133, 1000, 1001), (300, 2056, 2058), (77, 64, 70)))
        print(f"{'':24s} exact: {transpose_exact(kern, xs[0], w.padded_k)}, on tails: {tails}", flush=True)
    key = ("vnm_sm90", run.atom)
    values, e, gidx = kernel_layout(w, run.atom)
    gathers = {"as is": gidx,
               "contiguous rows": torch.where(gidx >= 0, torch.arange(gidx.shape[1], device="cuda",
                                                                      dtype=torch.int32) % w.padded_k, gidx),
               "same rows every block": gidx[:1].expand_as(gidx).contiguous()}
    for name, g in gathers.items():
        w.__dict__["_layouts"] = {key: (values, e, g)}
        t = time_rotating(lambda i: run(xs[i], w, None, y), copies, reps=50)
        print(f"{name:24s} {t.p50_ms:.4f} ms", flush=True)
    t = time_rotating(lambda i: xs[i].t().contiguous(), copies, reps=50)
    print(f"{'torch transpose':24s} {t.p50_ms:.4f} ms", flush=True)
    dense = w.to_dense()
    t = time_rotating(lambda i: torch.nn.functional.linear(xs[i], dense), copies, reps=50)
    print(f"{'cuBLAS dense':24s} {t.p50_ms:.4f} ms", flush=True)


if __name__ == "__main__":
    main()

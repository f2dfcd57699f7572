"""Quick vnm_sm80 layout check on small problems: error overall and, when wrong, by region.

    python3 benchmarks/smoke_vnm_sm80.py
"""

from __future__ import annotations

import torch

import cutlass_nm
from cutlass_nm.families import KernelTypes, get_family
from cutlass_nm.kernels import get_kernel, precompile

CONFIGS = ["64x64x64x32x32x3x1", "128x128x64x64x64x4x1"]


def main() -> None:
    fam = get_family("vnm_sm80")
    types = KernelTypes("f16", "f16", False)
    keys = ("tile_m", "tile_n", "tile_k", "warp_m", "warp_n", "stages", "swizzle")
    cfgs = [fam.Config.from_record(dict(zip(keys, map(int, s.split("x")), strict=True))) for s in CONFIGS]
    print([r if isinstance(r, Exception) else "ok" for r in precompile([("vnm_sm80", c, types) for c in cfgs])])
    torch.manual_seed(0)
    for cfg in cfgs:
        for m, n, k, pat in [(64, 128, 512, "128:2:8"), (200, 384, 1000, "128:2:7")]:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            w, _ = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16), pat)
            y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
            get_kernel(("vnm_sm80", cfg, types))(x, w, None, y)
            torch.cuda.synchronize()
            ref = x.double() @ w.to_dense().double().T
            err = ((y.double() - ref).norm() / ref.norm()).item()
            print(cfg, (m, n, k, pat), f"rel_err={err:.2e} nan={int(y.isnan().sum())}", flush=True)
            if not err < 2e-3:
                bad = ((y.double() - ref).abs() > 1e-2 * ref.abs().max()) | y.isnan()
                print("  bad tokens", bad.any(1).nonzero().flatten()[:16].tolist(), "bad rows",
                      bad.any(0).nonzero().flatten()[:16].tolist(), "frac", bad.float().mean().item(),
                      "bad by (token % 8, row % 16)", bad.reshape(-1)[:0].tolist(),
                      [[int(bad[t::8, r::16].sum()) for r in range(16)] for t in range(8)])
                print("  y[:2,:8]", y[:2, :8].tolist(), "\n  ref[:2,:8]", ref[:2, :8].tolist())


if __name__ == "__main__":
    main()

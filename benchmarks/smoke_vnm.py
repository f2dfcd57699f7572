"""Quick vnm_sm90 layout check on tiny problems: error overall and by region (rows, tokens, gathered K).

    python3 benchmarks/smoke_vnm.py
"""

from __future__ import annotations

import torch

import cutlass_nm
from cutlass_nm.families import KernelTypes, get_family
from cutlass_nm.kernels import get_kernel, precompile

CONFIGS = [(64, 64, 64, 2, 1), (64, 128, 64, 4, 1), (128, 128, 64, 4, 2)]


def main() -> None:
    fam = get_family("vnm_sm90")
    types = KernelTypes("f16", "f16", False)
    cfgs = [fam.Config(tile_m=a, tile_n=b, tile_k=c, stages=d, consumers=e) for a, b, c, d, e in CONFIGS]
    print([r if isinstance(r, Exception) else "ok" for r in precompile([("vnm_sm90", c, types) for c in cfgs])])
    torch.manual_seed(0)
    for cfg in cfgs:
        for m, n, k, pat in [(64, 128, 64, "128:2:4"), (64, 128, 512, "128:2:8"), (200, 384, 1000, "128:2:7")]:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            w, _ = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16), pat)
            y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
            get_kernel(("vnm_sm90", cfg, types))(x, w, None, y)
            torch.cuda.synchronize()
            ref = x.double() @ w.to_dense().double().T
            d = (y.double() - ref).abs()
            err = ((y.double() - ref).norm() / ref.norm()).item()
            print(cfg, (m, n, k, pat), f"rel_err={err:.2e} nan={int(y.isnan().sum())}", flush=True)
            if not err < 2e-3:
                bad = (d > 1e-2 * ref.abs().max()) | y.isnan()
                print("  bad tokens", bad.any(1).nonzero().flatten()[:16].tolist(),
                      "bad rows", bad.any(0).nonzero().flatten()[:16].tolist(), "frac", bad.float().mean().item())
                g = w.gathered_24().to_dense().double()
                idx = w.gather_index().long()
                xp = torch.nn.functional.pad(x.double(), (0, w.padded_k - k))
                alt = torch.cat([xp[:, idx[r // w.pattern.v]] @ g[r:r + w.pattern.v].T for r in range(0, n, 128)], 1)
                print("  gathered-2:4 reference agrees with dense:", torch.allclose(alt, ref))


if __name__ == "__main__":
    main()

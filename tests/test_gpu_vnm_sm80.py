"""vnm_sm80 on the GPU: every instantiated CTA/warp tile (its epilogue reads the warp accumulator layout) and
V = 64 weights under tile_m = 128 configs, against an fp64 reference with poisoned outputs and tails."""

from __future__ import annotations

import pytest
import torch
from gpu_cases import case as _case
from gpu_cases import rel_err

from cutlass_nm.families import FAMILIES, KernelTypes

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
F16 = KernelTypes("f16", "f16", False)


def _configs() -> list:
    from cutlass_nm.families.vnm_sm80.family import SHAPES, Config

    out = []
    for i, ((tm, tn, tk), (wm, wn)) in enumerate(sorted(SHAPES.items())):
        cfg = Config(tile_m=tm, tile_n=tn, tile_k=tk, warp_m=wm, warp_n=wn, stages=3, swizzle=(1, 2, 4, 8)[i % 4])
        out.append(cfg)
    return out


@pytest.fixture(scope="module", autouse=True)
def _precompile_in_parallel():
    if not torch.cuda.is_available() or "vnm_sm80" not in FAMILIES:
        return
    from cutlass_nm.families.vnm_sm80.family import fallback_config
    from cutlass_nm.kernels import precompile

    cfgs = set(_configs()) | {fallback_config(c) for c in _configs()}
    failures = [r for r in precompile([("vnm_sm80", c, F16) for c in cfgs]) if isinstance(r, Exception)]
    assert not failures, failures[0]


@pytest.mark.parametrize("cfg", _configs(), ids=lambda c: "x".join(str(v) for v in c.to_record().values()))
@pytest.mark.parametrize("pattern", ["128:2:10", "64:2:8"])
def test_every_tile_shape(cfg, pattern):
    from cutlass_nm.kernels import get_kernel

    m, n, k = 300, 704, 2056  # tails in m, n (704 = 5.5 x 128) and k (not a multiple of M)
    x, w, _, ref = _case(m, n, k, pattern, torch.float16, seed=11, with_bias=False)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    get_kernel(("vnm_sm80", cfg, F16))(x, w, None, y)  # V = 64 under tile_m = 128: its twin runs
    torch.cuda.synchronize()
    assert torch.isfinite(y).all(), "unwritten (poisoned) or non-finite outputs"
    assert rel_err(y, ref) < TOL[torch.float16]


def test_rejects_v32():
    """CTA tiles are 64 or 128 rows, one V-block each: V = 32 weights are refused, never run wrong."""
    import cutlass_nm
    from cutlass_nm import ShapeError

    x, w, _, _ = _case(8, 64, 256, "32:2:8", torch.float16, seed=7, with_bias=False)
    with pytest.raises(ShapeError, match="must divide V=32"):
        cutlass_nm.matmul(x, w, family="vnm_sm80")

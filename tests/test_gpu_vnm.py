"""V:N:M kernels on the GPU against an fp64 reference: random inputs, poisoned outputs, tails, m = 1."""

from __future__ import annotations

import os

import pytest
import torch
from gpu_cases import case as _case
from gpu_cases import rel_err

import cutlass_nm
from cutlass_nm import ShapeError

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
# (m, n, k): m = 1, tails in m, n and k (k not a multiple of M either), an aligned LLM-like one
SHAPES = [(1, 256, 512), (7, 192, 250), (133, 320, 1000), (300, 640, 2056), (1024, 2048, 4096)]
PATTERNS = ["128:2:8", "64:2:7", "128:2:10", "64:2:16"]


def _families() -> list[str]:
    if not torch.cuda.is_available():
        return ["vnm_sm90"]
    from cutlass_nm.families import FAMILIES

    cap = torch.cuda.get_device_capability()
    names = (["vnm_sm90"] if cap == (9, 0) else []) + (["vnm_sm80"] if cap >= (8, 0) else [])
    only = os.environ.get("CUTLASS_NM_TEST_FAMILIES")  # e.g. "vnm_sm80": test (and build) only these
    return [n for n in names if n in FAMILIES and (not only or n in only.split(","))]


@pytest.fixture(scope="module", autouse=True)
def _precompile_in_parallel():
    """Build every kernel these tests reach at once, on all cores (CUTLASS_NM_TEST_PRECOMPILE=0: skip, when a
    -k selection needs a few kernels that a script built)."""
    if not torch.cuda.is_available() or os.environ.get("CUTLASS_NM_TEST_PRECOMPILE") == "0":
        return
    from cutlass_nm.families import KernelTypes, Problem, get_family
    from cutlass_nm.families.vnm_sm80.family import fallback_config as sm80_fallback
    from cutlass_nm.families.vnm_sm90.family import fallback_config
    from cutlass_nm.kernels import precompile

    kids = set()
    for name in _families():
        fam = get_family(name)
        for m, n, k in SHAPES:
            for d in ("f16", "bf16"):
                for b in (False, True):
                    types = KernelTypes(d, d, b)
                    p = Problem(m, n, k, types)
                    cfg = fam.heuristic(p)
                    kids.add((name, cfg, types))
                    if name == "vnm_sm90" and cfg.tile_m == 128:  # V = 64 weights run its tile_m = 64 twin
                        kids.add((name, fallback_config(cfg, p), types))
                    if name == "vnm_sm80" and cfg.tile_m == 128:
                        kids.add((name, sm80_fallback(cfg), types))
        types = KernelTypes("bf16", "f32", True)
        kids.add((name, fam.heuristic(Problem(96, 256, 512, types)), types))
    if "vnm_sm90" in _families():
        kids.update(_sm90_variant_kids())
    failures = [r for r in precompile(sorted(kids, key=str)) if isinstance(r, Exception)]
    assert not failures, failures[0]


@pytest.mark.parametrize("family", _families())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_reference(family, dtype, pattern, shape, with_bias):
    m, n, k = shape
    x, w, bias, ref = _case(m, n, k, pattern, dtype, seed=hash((shape, pattern, with_bias)) % 2**31,
                            with_bias=with_bias)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)  # poison
    y = cutlass_nm.matmul(x, w, bias, out=out, family=family)
    torch.cuda.synchronize()
    assert y.data_ptr() == out.data_ptr()
    assert torch.isfinite(y).all(), "unwritten (poisoned) or non-finite outputs"
    assert rel_err(y, ref) < TOL[dtype]


@pytest.mark.parametrize("family", _families())
def test_f32_output(family):
    x, w, bias, ref = _case(96, 256, 512, "128:2:8", torch.bfloat16, seed=3, with_bias=True)
    out = torch.full((96, 256), float("nan"), device="cuda", dtype=torch.float32)
    y = cutlass_nm.matmul(x, w, bias, out=out, family=family)
    torch.cuda.synchronize()
    assert torch.isfinite(y).all() and rel_err(y, ref) < TOL[torch.bfloat16]


def test_default_dispatch_runs_vnm():
    x, w, _, ref = _case(64, 256, 512, "128:2:8", torch.float16, seed=5, with_bias=False)
    assert rel_err(cutlass_nm.matmul(x, w), ref) < TOL[torch.float16]


def test_sm90_rejects_v32():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("vnm_sm90 needs sm_90")
    x, w, _, _ = _case(8, 64, 256, "32:2:8", torch.float16, seed=7, with_bias=False)
    with pytest.raises(ShapeError, match="V % tile_m"):
        cutlass_nm.matmul(x, w, family="vnm_sm90")


# vnm_sm90's transpose / gather / producer / consumer-mainloop variants other than the heuristic's (transpose 1,
# cp.async gather, batched producer, CUTLASS's mainloop): each against fp64, tails, m = 1, V = 64 via the
# tile_m = 64 twin, bf16 with bias.
SM90_VARIANTS = [(1, 0, 0, 0), (1, 1, 0, 0), (0, 0, 1, 0), (1, 0, 1, 1)]  # (transpose, gather, producer, mma_pipe)


SM90_CASES = [((1, 256, 512), "128:2:8", torch.float16, False), ((133, 320, 1000), "128:2:10", torch.float16, False),
              ((300, 640, 2056), "64:2:7", torch.bfloat16, True), ((1024, 2048, 4096), "128:2:16", torch.float16, True)]


def _sm90_variant(variant: tuple[int, int, int, int], case: tuple):
    """(kernel id, its V = 64 twin) of a variant of the heuristic config for a case."""
    from cutlass_nm.families import KernelTypes, Problem, get_family
    from cutlass_nm.families.vnm_sm90.family import fallback_config

    (m, n, k), _, dtype, with_bias = case
    d = "f16" if dtype == torch.float16 else "bf16"
    types = KernelTypes(d, d, with_bias)
    fam = get_family("vnm_sm90")
    p = Problem(m, n, k, types)
    cfg = fam.Config.from_record({**fam.heuristic(p).to_record(), "transpose": variant[0], "gather": variant[1],
                                  "producer": variant[2], "mma_pipe": variant[3]})
    return ("vnm_sm90", cfg, types), ("vnm_sm90", fallback_config(cfg, p), types)


def _sm90_variant_kids() -> set:
    return {kid for v in SM90_VARIANTS for c in SM90_CASES for kid in _sm90_variant(v, c)}


@pytest.mark.parametrize("variant", SM90_VARIANTS, ids=lambda v: f"tr{v[0]}g{v[1]}p{v[2]}m{v[3]}")
@pytest.mark.parametrize("case", SM90_CASES, ids=lambda c: f"{'x'.join(map(str, c[0]))}-{c[1]}")
def test_sm90_variants_match_reference(variant, case):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("vnm_sm90 needs sm_90")
    from cutlass_nm.kernels import get_kernel

    (m, n, k), pattern, dtype, with_bias = case
    kid, _ = _sm90_variant(variant, case)
    x, w, bias, ref = _case(m, n, k, pattern, dtype, seed=11, with_bias=with_bias)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    get_kernel(kid)(x, w, bias, out)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "unwritten (poisoned) or non-finite outputs"
    assert rel_err(out, ref) < TOL[dtype]

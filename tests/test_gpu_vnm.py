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
                    kids.update(fam.helpers(cfg, types))  # a tile_m = 128 kernel's tile_m = 64 twin (V = 64)
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


# vnm_sm90's knob values beside the heuristic's, each against fp64 on tails, m = 1, V = 64 (through the tile_m = 64
# twin) and bf16 with bias: our pipelined mainloop, the shallowest pipelines, 7 stages, tile_n = 256 (the large-m
# tile, which these shapes' heuristic does not reach), a CTA pair sharing A and E, token-tile groups.
SM90_VARIANTS = [{"mma_pipe": 1}, {"stages": 2}, {"stages": 3, "mma_pipe": 1}, {"tile_k": 64, "stages": 7},
                 {"tile_n": 256, "tile_k": 64, "stages": 4}, {"cluster": 2}, {"raster": 1}]


SM90_CASES = [((1, 256, 512), "128:2:8", torch.float16, False), ((133, 320, 1000), "128:2:10", torch.float16, False),
              ((300, 640, 2056), "64:2:7", torch.bfloat16, True), ((1024, 2048, 4096), "128:2:16", torch.float16, True)]


def _sm90_variant(variant: dict, case: tuple):
    """(kernel id, its helper kernel ids) of a variant of the heuristic config for a case."""
    from cutlass_nm.families import KernelTypes, Problem, get_family

    (m, n, k), pattern, dtype, with_bias = case
    d = "f16" if dtype == torch.float16 else "bf16"
    types = KernelTypes(d, d, with_bias)
    fam = get_family("vnm_sm90")
    p = Problem(m, n, k, types, pattern)
    cfg = fam.Config.from_record({**fam.heuristic(p).to_record(), **variant})
    assert fam.check(cfg, p) is None, (variant, case)
    return ("vnm_sm90", cfg, types), fam.helpers(cfg, types)


def _sm90_variant_kids() -> set:
    kids = set()
    for v in SM90_VARIANTS:
        for c in SM90_CASES:
            kid, helpers = _sm90_variant(v, c)
            kids.update([kid, *helpers])
    kids.update(_sm90_tile_m_256())
    for variant in SAME_TEMPLATE_ARGS:
        kid, helpers = _sm90_variant(variant, SM90_CASES[1])
        kids.update([kid, *helpers])
    return kids


@pytest.mark.parametrize("variant", SM90_VARIANTS, ids=lambda v: "-".join(f"{k}{x}" for k, x in v.items()))
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


# two configs that differ only in their pipeline depth: one launch helper instantiation, different shared memory
SAME_TEMPLATE_ARGS = [{"stages": 2}, {"stages": 5}]


def test_sm90_kernels_of_one_launch_template_each_set_their_own_shared_memory():
    """Two kernels whose launch helper has the same template arguments, run in one process, the smaller pipeline
    first: each sets its own shared-memory attribute (none inherits the other's "already set")."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("vnm_sm90 needs sm_90")
    from cutlass_nm.kernels import get_kernel

    (m, n, k), pattern, dtype, with_bias = SM90_CASES[1]
    x, w, bias, ref = _case(m, n, k, pattern, dtype, seed=17, with_bias=with_bias)
    for variant in SAME_TEMPLATE_ARGS:
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        get_kernel(_sm90_variant(variant, SM90_CASES[1])[0])(x, w, bias, out)
        torch.cuda.synchronize()
        assert torch.isfinite(out).all() and rel_err(out, ref) < TOL[dtype], variant


def _sm90_tile_m_256() -> list:
    """vnm_sm90 with 256-row tiles (two 128-row MMA tiles on two consumers), for V = 256 weights."""
    from cutlass_nm.families import KernelTypes, get_family

    cfg = get_family("vnm_sm90").Config(tile_m=256, tile_n=128, tile_k=64, stages=4, consumers=2)
    return [("vnm_sm90", cfg, KernelTypes(d, d, b)) for d, b in (("f16", False), ("bf16", True))]


@pytest.mark.parametrize("kid", _sm90_tile_m_256(), ids=lambda kid: kid[2].dtype)
@pytest.mark.parametrize("shape", [(1, 256, 512), (133, 768, 1000)], ids=lambda s: "x".join(map(str, s)))
def test_sm90_tile_m_256_matches_reference(kid, shape):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("vnm_sm90 needs sm_90")
    from cutlass_nm.kernels import get_kernel

    m, n, k = shape
    dtype = torch.float16 if kid[2].dtype == "f16" else torch.bfloat16
    x, w, bias, ref = _case(m, n, k, "256:2:8", dtype, seed=13, with_bias=kid[2].bias)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    get_kernel(kid)(x, w, bias, out)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "unwritten (poisoned) or non-finite outputs"
    assert rel_err(out, ref) < TOL[dtype]

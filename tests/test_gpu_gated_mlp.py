"""The fused gate/up SwiGLU kernel (vnm_glu_sm90), vnm_sm90 gathering from a transposed h, and gated_mlp, on the
GPU against fp64 references: random inputs, NaN-poisoned outputs, tails in m and k, m = 1, fp16 and bf16."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from gpu_cases import rel_err

import cutlass_nm
from cutlass_nm.families import KernelTypes, Problem, get_family
from cutlass_nm.formats.glu import fuse_glu, split_glu
from cutlass_nm.gated_mlp import gated_mlp

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
GLU = get_family("vnm_glu_sm90")
# (m, hidden, k): a tail in m (17: one token past the decode path), k not a multiple of M, an LLM-like one
GLU_SHAPES = [(17, 256, 512), (133, 384, 1000), (300, 640, 2056), (2048, 1024, 4096)]
# the heuristic's config, then every other knob value: 64 gathered columns, 64 tokens, our mainloop, 2 stages, a
# CTA pair sharing A and E (with and without token-tile groups)
GLU_VARIANTS = [{}, {"tile_k": 64, "stages": 6}, {"tile_n": 64, "stages": 4}, {"mma_pipe": 1}, {"stages": 2},
                {"cluster": 2}, {"cluster": 2, "raster": 0}]
PATTERNS = ["128:2:8", "128:2:7", "128:2:16"]
MLP_M = [1, 5, 16, 17, 133, 1024]


def _dtype_name(dtype: torch.dtype) -> str:
    return "f16" if dtype == torch.float16 else "bf16"


def _glu_kid(variant: dict, dtype: torch.dtype) -> tuple:
    return "vnm_glu_sm90", GLU.Config.from_record({**GLU.Config().to_record(), **variant}), \
        KernelTypes(_dtype_name(dtype), _dtype_name(dtype), False)


def _mlp_kids(m: int, dim: int, hidden: int, pattern: str, dtype: torch.dtype) -> set:
    """The kernels gated_mlp resolves for one problem (heuristic configs: the tests run with CUTLASS_NM_DB=off)."""
    types = KernelTypes(_dtype_name(dtype), _dtype_name(dtype), False)
    fused = "256:" + pattern.split(":", 1)[1]
    if m > 16:
        fam = get_family("vnm_sm90")
        return {_glu_kid({}, dtype), ("vnm_sm90", fam.heuristic(Problem(m, dim, hidden, types, pattern)), types)}
    fam = get_family("nm_decode")
    return {("nm_decode", fam.heuristic(Problem(m, 2 * hidden, dim, types, fused)), types),
            ("nm_decode", fam.heuristic(Problem(m, dim, hidden, types, pattern)), types)}


MLP_CASES = [(m, 512, 384, "128:2:8", torch.float16) for m in MLP_M] + \
            [(300, 1000, 640, "128:2:10", torch.bfloat16), (64, 4096, 1408, "128:2:16", torch.float16)]


@pytest.fixture(scope="module", autouse=True)
def _precompile_in_parallel():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        return
    if os.environ.get("CUTLASS_NM_TEST_PRECOMPILE") == "0":
        return
    from cutlass_nm.kernels import precompile

    kids = {_glu_kid(v, torch.float16) for v in GLU_VARIANTS} | {_glu_kid({}, torch.bfloat16)}
    for case in MLP_CASES:
        kids |= _mlp_kids(*case)
    sm90 = get_family("vnm_sm90")
    for (m, n, k), bias in (((17, 256, 384), False), ((300, 640, 1000), False), ((300, 384, 32768), True)):
        types = KernelTypes("f16", "f16", bias)
        for raster, cluster in ((0, 1), (1, 1), (0, 2), (1, 2)):
            cfg = dataclasses.replace(sm90.heuristic(Problem(m, n, k, types)), raster=raster, cluster=cluster)
            kids.add(("vnm_sm90", cfg, types))
    failures = [r for r in precompile(sorted(kids, key=str)) if isinstance(r, Exception)]
    assert not failures, failures[0]


@pytest.fixture(autouse=True)
def _needs_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("vnm_glu_sm90 needs sm_90")


def _weights(hidden: int, k: int, pattern: str, dtype: torch.dtype, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    gate, up = (torch.randn(hidden, k, device="cuda", dtype=dtype, generator=g) for _ in range(2))
    return fuse_glu(gate, up, pattern), g


def _h_ref(x: torch.Tensor, fused) -> torch.Tensor:
    gate, up = split_glu(fused)
    xd = x.double()
    return torch.nn.functional.silu(xd @ gate.double().T) * (xd @ up.double().T)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("shape", GLU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("variant", range(len(GLU_VARIANTS)))
def test_glu_kernel_matches_reference(variant, shape, pattern, dtype):
    from cutlass_nm.kernels import get_kernel

    if variant and (dtype == torch.bfloat16 or pattern != "128:2:8"):
        pytest.skip("variants run fp16 128:2:8 (the heuristic config runs every pattern and dtype)")
    m, hidden, k = shape
    fused, g = _weights(hidden, k, pattern, dtype, seed=3)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    ldx = -(-m // 8) * 8
    ht = torch.full((hidden + 8, ldx), float("nan"), device="cuda", dtype=dtype)  # poison, and rows past hidden
    get_kernel(_glu_kid(GLU_VARIANTS[variant], dtype))(x, fused, None, ht)
    torch.cuda.synchronize()
    assert torch.isfinite(ht[:hidden]).all(), "unwritten (poisoned) or non-finite outputs"
    assert torch.isnan(ht[hidden:]).all(), "wrote past the hidden rows"
    assert (ht[:hidden, m:] == 0).all(), "tokens past m must be silu(0) * 0 = 0"
    assert rel_err(ht[:hidden, :m].T, _h_ref(x, fused)) < TOL[dtype]


@pytest.mark.parametrize("cluster", [1, 2])
@pytest.mark.parametrize("raster", [0, 1])
@pytest.mark.parametrize("shape", [(17, 256, 384), (300, 640, 1000)], ids=lambda s: "x".join(map(str, s)))
def test_sm90_gathers_from_a_transposed_input(shape, raster, cluster):
    """vnm_sm90 with ``xt`` given skips its transpose and gathers from xt (zeros past k in the rows padding names)."""
    m, n, k = shape
    pattern = "128:2:7"  # k % 7 != 0: the gather index names padding rows
    types = KernelTypes("f16", "f16", False)
    g = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g)
    w, _ = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16, generator=g), pattern)
    ldx = -(-m // 8) * 8
    xt = torch.zeros(w.padded_k, ldx, device="cuda", dtype=torch.float16)
    xt[:k, :m] = x.T
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    kernel = _sm90_kernel(Problem(m, n, k, types, pattern), raster, cluster)
    kernel(x, w, None, y, xt)
    torch.cuda.synchronize()
    assert torch.isfinite(y).all(), "unwritten (poisoned) or non-finite outputs"
    assert rel_err(y, x.double() @ w.to_dense().double().T) < TOL[torch.float16]
    with pytest.raises(cutlass_nm.ShapeError, match="xt must be"):
        kernel(x, w, None, y, xt[:, :8])


def _sm90_kernel(problem: Problem, raster: int, cluster: int = 1):
    from cutlass_nm.kernels import get_kernel

    fam = get_family("vnm_sm90")
    cfg = dataclasses.replace(fam.heuristic(problem), raster=raster, cluster=cluster)
    return get_kernel(("vnm_sm90", cfg, problem.types))


@pytest.mark.parametrize("cluster", [1, 2])
@pytest.mark.parametrize("raster", [0, 1])
def test_sm90_raster_groups_with_a_partial_last_group(raster, cluster):
    """raster = 1 with k large enough that a group holds 2 of the 3 token tiles (8 MB of xt per 128-token tile):
    every (weight tile, token tile) is computed once, including the last, partial group's. cluster = 2 pads the
    token tiles to 4 (a CTA pair shares A and E by multicast; the padding CTA writes nothing)."""
    m, n, k = 300, 384, 32768
    types = KernelTypes("f16", "f16", True)
    g = torch.Generator(device="cuda").manual_seed(6)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g)
    w, _ = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16, generator=g), "128:2:8")
    bias = torch.randn(n, device="cuda", dtype=torch.float16, generator=g)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    _sm90_kernel(Problem(m, n, k, types, "128:2:8"), raster, cluster)(x, w, bias, y)
    torch.cuda.synchronize()
    assert torch.isfinite(y).all(), "unwritten (poisoned) or non-finite outputs"
    assert rel_err(y, x.double() @ w.to_dense().double().T + bias.double()) < TOL[torch.float16]


@pytest.mark.parametrize("case", MLP_CASES, ids=lambda c: f"m{c[0]}-{c[1]}x{c[2]}-{c[3]}")
def test_gated_mlp_matches_reference(case):
    m, dim, hidden, pattern, dtype = case
    fused, g = _weights(hidden, dim, pattern, dtype, seed=9)
    down, _ = cutlass_nm.prune(torch.randn(dim, hidden, device="cuda", dtype=dtype, generator=g), pattern)
    x = torch.randn(2, m, dim, device="cuda", dtype=dtype, generator=g)[1]  # a view at an offset: still aligned
    torch.full((4 * m * max(dim, hidden),), float("nan"), device="cuda", dtype=dtype)  # leave NaN in the allocator
    y = gated_mlp(x, fused, down)
    torch.cuda.synchronize()
    ref = _h_ref(x, fused) @ down.to_dense().double().T
    assert y.shape == (m, dim) and torch.isfinite(y).all()
    assert rel_err(y, ref) < TOL[dtype]


def test_sparse_gated_mlp_module_compiles_and_replays():
    """SparseGatedMLP through torch.compile(fullgraph=True) and CUDA-graph replay matches eager, 3-D input."""
    from torch import nn

    from cutlass_nm.nn import SparseGatedMLP

    dim, hidden = 512, 1024
    lins = [nn.Linear(a, b, bias=False).cuda().half() for a, b in ((dim, hidden), (dim, hidden), (hidden, dim))]
    mod = SparseGatedMLP.from_linears(*lins, "128:2:8")
    x = torch.randn(2, 64, dim, device="cuda", dtype=torch.float16)
    eager = mod(x)
    gate, up, down = (w.double() for w in mod.dense_weights())
    ref = (torch.nn.functional.silu(x.double() @ gate.T) * (x.double() @ up.T)) @ down.T
    assert rel_err(eager, ref) < TOL[torch.float16]
    assert rel_err(torch.compile(mod, fullgraph=True)(x), eager) < 1e-6
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = mod(static_x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, eager)

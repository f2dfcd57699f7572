"""General N:M SpMM on CUDA cores (nm_simt) on the GPU: the heuristic's choices and a curated set of configs that
exercises every value of the config space at least once; random N:M (3:7, 5:16, 16:32 ...), vectors 1-128, tails,
m = 1, fp32 and fp16/bf16 inputs, bias, every split-K sum; outputs NaN-poisoned, fp64 references. Every kernel is
built in parallel first (about 60), so the module runs in a few minutes on an H100."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import cutlass_nm
from cutlass_nm.families import KernelTypes, Problem
from cutlass_nm.families.nm_simt.family import FAMILY, Config
from cutlass_nm.formats.nm import compress_nm
from cutlass_nm.kernels import get_kernel, precompile

pytestmark = pytest.mark.gpu
NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
DTYPES = {name: dt for dt, name in NAMES.items()}
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}  # by the output type
SHAPES = [(300, 1000, 1003), (129, 520, 1024), (17, 64, 96)]  # k % 4 != 0 (general path), 16-byte path, small
# more CTA tiles than an H100 (132 SMs) holds at once, so that split_reduce = 3 runs some tiles whole
TAIL_SHAPES = [*SHAPES, (520, 8200, 1000)]
F32, F16_F32 = KernelTypes("f32", "f32", True), KernelTypes("f16", "f32", True)
F16, BF16 = KernelTypes("f16", "f16", True), KernelTypes("bf16", "bf16", True)
TYPES = (F32, F16, F16_F32, BF16)
MATMUL_PATTERNS = ["1:4", "2:8", "3:7", "5:16", "16:32", "31:64", "1:2"]

# name -> (config, the types it runs with). Together they take every value of Config.SPACE (test_every_value...).
TMA_8X16 = Config(block_tokens=256, thread_tokens=16, k_cols=64, stages=3, x_transposed=1, tma=1)  # producer group
KW = Config(block_rows=128, block_tokens=128, thread_tokens=16, k_cols=128, stages=3, x_transposed=1, tma=1,
            k_warps=2)
CONFIGS = {
    # cp.async, token-major x (modes 0 and 1)
    "cp_plain": (Config(), (F32, F16)),
    "cp_split4_partials_4stages": (Config(split_k=4, stages=4), (F32, BF16)),
    "cp_atomics2": (Config(k_cols=64, stages=2, split_k=2, split_reduce=1), (F32, F16_F32)),
    "cp_cluster2": (Config(k_cols=64, stages=2, split_k=2, split_reduce=2), (F32, F16)),
    "cp_tail2": (Config(k_cols=32, stages=2, split_k=2, split_reduce=3), (F32, F16_F32)),
    "cp_kwarps_split2": (Config(block_tokens=64, k_cols=32, stages=3, split_k=2, k_warps=2), (F32, BF16)),
    # cp.async, transposed x (mode 2)
    "cpT_256x64_5stages": (Config(block_rows=256, block_tokens=64, k_cols=64, stages=5, x_transposed=1), (F32,)),
    "cpT_16x8_k96": (Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=96, stages=2, x_transposed=1),
                     (F32, F16)),
    # TMA with the producer warpgroup (one CTA per SM)
    "tma_8x16": (TMA_8X16, (F32, F16, F16_F32, BF16)),
    "tma_8x16_atomics3": (replace(TMA_8X16, split_k=3, split_reduce=1), (F32, F16_F32)),
    "tma_8x16_cluster4": (replace(TMA_8X16, split_k=4, split_reduce=2), (F32, F16)),
    "tma_8x16_tail3": (replace(TMA_8X16, split_k=3, split_reduce=3), (F32, F16_F32)),
    "tma_8x16_k32_5stages": (replace(TMA_8X16, k_cols=32, stages=5), (F32,)),
    "tma_16x8_cluster3": (Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=64, stages=3, split_k=3,
                                 x_transposed=1, tma=1, split_reduce=2), (F32, BF16)),
    "tma_16x8_tail4_k96": (Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=96, stages=3, split_k=4,
                                  x_transposed=1, tma=1, split_reduce=3), (F32,)),
    # TMA filled by computing warp 0 (two CTAs per SM)
    "tma_256x64_k32_cluster2": (Config(block_rows=256, block_tokens=64, k_cols=32, stages=2, split_k=2,
                                       x_transposed=1, tma=1, split_reduce=2), (F32, F16)),
    "tma_256x64_4stages_split2": (Config(block_rows=256, block_tokens=64, k_cols=64, stages=4, split_k=2,
                                         x_transposed=1, tma=1), (F32,)),
    # chain = 1: 8 x 16 tiles chaining their k-tiles
    "chain": (replace(TMA_8X16, chain=1), (F32, F16)),
    "chain_cluster2": (replace(TMA_8X16, chain=1, split_k=2, split_reduce=2), (F32,)),
    "chain_tail3_k96": (replace(TMA_8X16, chain=1, k_cols=96, stages=2, split_k=3, split_reduce=3), (F16_F32,)),
    # k_warps = 2: the heuristic's 256-511-token tiles, and a 16 x 8 one with atomics
    "kw_cluster2": (replace(KW, split_k=2, split_reduce=2), (F32, F16, BF16)),
    "kw_2stages_tail3": (replace(KW, stages=2, split_k=3, split_reduce=3), (F32, F16_F32)),
    "kw_16x8_atomics2_k96": (Config(block_rows=128, block_tokens=128, thread_rows=16, k_cols=96, stages=3, split_k=2,
                                    x_transposed=1, tma=1, split_reduce=1, k_warps=2), (F32,)),
}
CONFIG_PATTERNS = ["3:7", "16:32", "4:32", "1:8"]
VECTOR_CONFIGS = ("cp_plain", "cpT_16x8_k96", "tma_8x16")  # over every vector: modes 0, 1 and 2


def _heuristic_problems() -> list[Problem]:
    ps = [Problem(m, n, k, t, p, v) for m, n, k in SHAPES for t in (F32, F16, BF16) for p in MATMUL_PATTERNS
          for v in (1, 32)]
    ps += [Problem(m, 512, 768, t, "5:16", 32) for m in (1, 16) for t in (F32, F16)]
    ps += [Problem(m, n, 4096, F32, p, 32) for m, n in ((256, 4096), (256, 11008), (512, 11008), (2048, 4096))
           for p in ("16:32", "8:32", "1:8")]  # the k_warps, tail-split, cluster and 96-column choices
    return ps


@pytest.fixture(scope="module", autouse=True)
def _precompiled():
    """Build every kernel this module runs in parallel first (bias does not change the source)."""
    bad = [r for r in precompile(kernel_ids()) if isinstance(r, Exception)]
    assert not bad, bad[:1]
    cutlass_nm.set_selector(lambda family, problem: None)  # heuristics, not the tuning DB
    yield
    cutlass_nm.set_selector(None)


def kernel_ids() -> list:
    """Every kernel this module runs (a cache can be built off the GPU from this list)."""
    kids = {(FAMILY.name, FAMILY.heuristic(p), p.types) for p in _heuristic_problems()}
    kids |= {(FAMILY.name, cfg, t) for cfg, types in CONFIGS.values() for t in types}
    return sorted(kids, key=str)


def _case(m, n, k, pattern, dtype, vector, seed=0, bias=True):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    w = compress_nm(torch.randn(n, k, device="cuda", dtype=dtype, generator=g), pattern, vector, prune=True)
    b = torch.randn(n, device="cuda", dtype=dtype, generator=g) if bias else None
    ref = x.double() @ w.to_dense().double().T
    if b is not None:
        ref += b.double()
    return x, w, b, ref


def _err(y, ref) -> float:
    return ((y.double() - ref).norm() / ref.norm()).item()


def _fresh_inputs_match(shape, pattern, cfg, types, vector=32, seeds=(1, 2)):
    """cfg on one NaN-poisoned output, a call per seed with new inputs (a stale zero, sum or workspace would show),
    each against the fp64 reference in the output type's tolerance; a config refused for shared memory is skipped."""
    m, n, k = shape
    if (reason := FAMILY.check(cfg, Problem(m, n, k, types, pattern, vector))) is not None:
        assert "shared memory" in reason  # the k-tile does not fit this pattern and vector: refused before launch
        pytest.skip(reason)
    kern = get_kernel((FAMILY.name, cfg, types))
    out = DTYPES[types.out_dtype]
    y = torch.empty((m, n), device="cuda", dtype=out)
    for seed in seeds:
        x, w, b, ref = _case(m, n, k, pattern, DTYPES[types.dtype], vector, seed=seed)
        y.fill_(float("nan"))
        kern(x, w, b, y)
        torch.cuda.synchronize()
        assert torch.isfinite(y).all()
        assert _err(y, ref) < TOL[out]


def test_every_value_of_the_space_is_exercised():
    """The curated configs (and the heuristic's) take every value of Config.SPACE: none is shipped untested."""
    cfgs = [cfg for cfg, _ in CONFIGS.values()] + [FAMILY.heuristic(p) for p in _heuristic_problems()]
    for name, values in Config.SPACE.items():
        assert {getattr(c, name) for c in cfgs} >= set(values), name
    assert all(FAMILY.check(cfg, Problem(129, 520, 1024, t, "4:32", 32)) is None for cfg, ts in CONFIGS.values()
               for t in ts)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("pattern", MATMUL_PATTERNS)
@pytest.mark.parametrize("vector", [1, 32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=NAMES.get)
def test_matmul_matches_reference(shape, pattern, vector, dtype):
    """The heuristic's config through cutlass_nm.matmul (its stages and rows follow the pattern and vector)."""
    m, n, k = shape
    x, w, b, ref = _case(m, n, k, pattern, dtype, vector)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    y = cutlass_nm.matmul(x, w, b, out=out, family="nm_simt")
    torch.cuda.synchronize()
    assert torch.isfinite(y).all()
    assert _err(y, ref) < TOL[dtype]


@pytest.mark.parametrize("problem", [p for p in _heuristic_problems() if p.k == 4096], ids=str)
def test_heuristic_large_choices_match_reference(problem):
    """The heuristic's k_warps, last-wave split, cluster-sum and 96-column tiles at the shapes that select them."""
    cfg = FAMILY.heuristic(problem)
    _fresh_inputs_match((problem.m, problem.n, problem.k), problem.pattern, cfg, problem.types, seeds=(7,))


@pytest.mark.parametrize(("name", "types"), [(n, t) for n, (_, ts) in CONFIGS.items() for t in ts],
                         ids=lambda v: v if isinstance(v, str) else f"{v.dtype}_{v.out_dtype}")
@pytest.mark.parametrize("pattern", CONFIG_PATTERNS)
@pytest.mark.parametrize("shape", TAIL_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_config_matches_reference(name, types, pattern, shape):
    """Each curated config, bias, vector 32, tails (k = 1003: the general path; k = 96: splits with no k-tiles), two
    calls with new inputs on one NaN-poisoned output."""
    _fresh_inputs_match(shape, pattern, CONFIGS[name][0], types)


@pytest.mark.parametrize("name", VECTOR_CONFIGS)
@pytest.mark.parametrize("vector", [1, 8, 16, 64, 128])
@pytest.mark.parametrize("pattern", ["2:4", "3:7", "5:16", "31:64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_vectors_match_reference(name, vector, pattern, shape):
    """Vectors below the thread's rows take the general path, others the fast ones; vector 128 spans CTAs."""
    cfg, types = CONFIGS[name]
    _fresh_inputs_match(shape, pattern, cfg, types[0], vector=vector, seeds=(3,))


@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=NAMES.get)
def test_small_m(m, dtype):
    x, w, b, ref = _case(m, 512, 768, "5:16", dtype, 32, seed=5)
    out = torch.full((m, 512), float("nan"), device="cuda", dtype=dtype)
    y = cutlass_nm.matmul(x, w, b, out=out, family="nm_simt")
    assert _err(y, ref) < TOL[dtype]


def test_fp32_routes_to_simt_and_half_f32_out():
    x, w, _, ref = _case(3, 512, 768, "2:8", torch.float32, 32, seed=9, bias=False)
    y = cutlass_nm.matmul(x.view(1, 3, 768), w)  # m = 3 in fp32: the decode path is half-only
    assert y.shape == (1, 3, 512) and _err(y.view(3, 512), ref) < TOL[torch.float32]
    xh, wh, _, refh = _case(300, 1000, 1003, "3:7", torch.float16, 32, seed=2, bias=False)
    y = cutlass_nm.matmul(xh, wh, out=torch.full((300, 1000), float("nan"), device="cuda"))
    assert y.dtype == torch.float32 and _err(y, refh) < TOL[torch.float32] * 10

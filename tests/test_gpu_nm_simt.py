"""General N:M SpMM on CUDA cores (nm_simt) on the GPU: random N:M (3:7, 5:16, 16:32 ...), vectors 1-128, tails,
m = 1, fp32 and fp16/bf16 inputs, bias, split-K, many configs; outputs poisoned, fp64 references."""

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
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}  # by the output type
SHAPES = [(300, 1000, 1003), (129, 520, 1024), (17, 64, 96)]  # k % 4 != 0 (general path), 16-byte path, small
CONFIGS = [Config(), Config(split_k=4), Config(block_rows=32, block_tokens=32, thread_rows=4, thread_tokens=4),
           Config(block_rows=256, block_tokens=64, k_cols=64, stages=3), Config(k_cols=16, stages=2, split_k=2),
           Config(block_rows=64, block_tokens=256, thread_tokens=16, k_cols=64, stages=2),
           Config(block_rows=128, block_tokens=64, thread_rows=4, thread_tokens=8, stages=5, split_k=8),
           Config(block_rows=256, block_tokens=128, thread_rows=16), Config(block_rows=64, block_tokens=128,
                                                                            thread_rows=16, k_cols=64, split_k=2),
           Config(x_transposed=1), Config(block_rows=256, block_tokens=64, k_cols=64, split_k=2, x_transposed=1),
           Config(block_tokens=256, thread_tokens=16, k_cols=16, x_transposed=1),
           Config(block_rows=32, block_tokens=32, thread_rows=4, thread_tokens=4, stages=4, x_transposed=1),
           Config(block_rows=256, block_tokens=64, k_cols=128, x_transposed=1),  # fits sparse patterns only
           Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=64, stages=2, x_transposed=1),
           # compact: x^T rows listed per CTA and k-tile
           Config(block_rows=256, block_tokens=64, k_cols=96, stages=2, x_transposed=1, compact=1),
           Config(block_rows=64, block_tokens=128, k_cols=64, stages=3, split_k=2, x_transposed=1, compact=1),
           Config(block_rows=32, block_tokens=32, thread_rows=4, thread_tokens=4, k_cols=128, x_transposed=1,
                  compact=1),
           # tma: stages filled by TMA on sm_90
           Config(block_rows=256, block_tokens=64, k_cols=64, stages=3, x_transposed=1, tma=1),
           Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=64, stages=2, x_transposed=1, tma=1),
           Config(block_rows=32, block_tokens=32, thread_rows=4, thread_tokens=4, k_cols=16, stages=5, x_transposed=1,
                  tma=1),
           # a deep TMA pipeline of 32-column k-tiles (stage parities wrap more often than they fill)
           Config(block_rows=128, block_tokens=256, thread_tokens=16, k_cols=32, stages=5, x_transposed=1, tma=1),
           # split-K 3: k-tiles that do not divide evenly among the splits
           Config(block_rows=128, block_tokens=256, thread_tokens=16, k_cols=64, stages=3, split_k=3, x_transposed=1,
                  tma=1),
           # split sums added into the zeroed fp32 output (vector atomics; the bias by the first split only)
           Config(block_rows=128, block_tokens=256, thread_tokens=16, k_cols=64, stages=3, split_k=3, x_transposed=1,
                  tma=1, split_reduce=1),
           Config(k_cols=16, stages=2, split_k=2, split_reduce=1)]
TRANSPOSED = Config(x_transposed=1, split_k=2)
COMPACT = Config(block_rows=256, block_tokens=64, k_cols=96, stages=2, split_k=2, x_transposed=1, compact=1)
COMPACT_ONE = Config(block_tokens=256, thread_tokens=16, k_cols=64, stages=2, split_k=2, x_transposed=1, compact=1,
                     split_reduce=1)
COMPACT_ONE_CONFIGS = (COMPACT_ONE, replace(COMPACT_ONE, k_cols=32, stages=4, split_k=1, split_reduce=0))
TMA = Config(block_rows=128, block_tokens=128, k_cols=64, stages=3, split_k=2, x_transposed=1, tma=1)
# split sums and the kernel before the GEMM: atomics into y zeroed by the transpose (transposed x) or the widening
# (fp16 x, untransposed) kernel, else by a memset; partials summed by split_reduce (launched under PDL on sm_90)
SPLIT_CONFIGS = (Config(block_tokens=256, thread_tokens=16, k_cols=64, stages=3, split_k=2, x_transposed=1, tma=1,
                        split_reduce=1),
                 Config(k_cols=16, stages=2, split_k=3, split_reduce=1),
                 Config(block_tokens=256, thread_tokens=16, k_cols=64, stages=3, split_k=3, x_transposed=1, tma=1))
FUSED = Config(block_tokens=256, thread_tokens=16, k_cols=64, stages=3, x_transposed=1, tma=1, fuse_x=1)
FUSED_CONFIGS = (FUSED, replace(FUSED, split_k=2, split_reduce=1),
                 Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=64, stages=2, x_transposed=1, tma=1,
                        fuse_x=1))
# split-K summed in a thread block cluster (split_reduce = 2): TMA with the producer warpgroup (split 4; split 3, whose
# ranks hold uneven token slices), TMA filled by computing warp 0 at two CTAs per SM (the tile of sums outgrows the
# two stages), and the cp.async path with token-major x
CLUSTER_CONFIGS = (Config(block_tokens=256, thread_tokens=16, k_cols=64, stages=3, split_k=4, x_transposed=1, tma=1,
                          split_reduce=2),
                   Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=64, stages=3, split_k=3,
                          x_transposed=1, tma=1, split_reduce=2),
                   Config(block_rows=256, block_tokens=64, k_cols=32, stages=2, split_k=2, x_transposed=1, tma=1,
                          split_reduce=2),
                   Config(k_cols=16, stages=2, split_k=2, split_reduce=2))
# k_warps = 2: two warp groups split every k-tile's steps and sum the tile in shared memory (TMA with the producer
# warpgroup, 16-row tiles, cluster and atomic split sums; cp.async at two CTAs per SM)
KWARPS_CONFIGS = (Config(block_rows=128, block_tokens=128, thread_tokens=16, k_cols=64, stages=3, x_transposed=1,
                         tma=1, k_warps=2),
                  Config(block_rows=128, block_tokens=128, thread_rows=16, k_cols=96, stages=3, x_transposed=1, tma=1,
                         split_k=2, split_reduce=2, k_warps=2),
                  Config(block_rows=128, block_tokens=128, thread_tokens=16, k_cols=128, stages=2, x_transposed=1,
                         tma=1, split_k=3, split_reduce=1, k_warps=2),
                  Config(block_tokens=64, k_cols=32, stages=3, split_k=2, k_warps=2),
                  # the heuristic's choice at 256-511 tokens where it fills the GPU (3 stages where they fit)
                  Config(block_rows=128, block_tokens=128, thread_tokens=16, k_cols=128, stages=2, x_transposed=1,
                         tma=1, split_k=2, split_reduce=2, k_warps=2),
                  Config(block_rows=128, block_tokens=128, thread_tokens=16, k_cols=128, stages=3, x_transposed=1,
                         tma=1, split_k=2, split_reduce=2, k_warps=2))
# split_reduce = 3: the full waves' tiles whole, the last partial wave's split by atomics (TMA 8 x 16 and chained
# 16 x 8 tiles at one CTA per SM, k_warps, cp.async at two CTAs per SM: untransposed x, y zeroed by a memset or
# the widening kernel)
TAIL_CONFIGS = (Config(block_tokens=256, thread_tokens=16, k_cols=64, stages=3, split_k=3, x_transposed=1, tma=1,
                       split_reduce=3),
                Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=96, stages=3, split_k=4,
                       x_transposed=1, tma=1, split_reduce=3),
                Config(block_rows=128, block_tokens=128, thread_tokens=16, k_cols=128, stages=2, x_transposed=1, tma=1,
                       split_k=2, split_reduce=3, k_warps=2),
                # the heuristic's 256-token tile where two splits do not fill the waves (n = 11008 at 1:8, 4:32)
                Config(block_rows=128, block_tokens=128, thread_tokens=16, k_cols=128, stages=3, x_transposed=1, tma=1,
                       split_k=3, split_reduce=3, k_warps=2),
                Config(k_cols=16, stages=2, split_k=2, split_reduce=3))
# chain = 1: 8 x 16 tiles chaining their k-tiles (whole, summed in a cluster, last-wave split; 96-column tiles)
CHAIN = Config(block_tokens=256, thread_tokens=16, k_cols=64, stages=3, x_transposed=1, tma=1, chain=1)
CHAIN_CONFIGS = (CHAIN, replace(CHAIN, split_k=2, split_reduce=2), replace(CHAIN, split_k=3, split_reduce=3),
                 replace(CHAIN, k_cols=96, stages=2))
# more CTA tiles than an H100 (132 SMs) holds at once, so that some run whole: 195 tiles of 128 x 256, 520 of 128 x 128
TAIL_SHAPES = [*SHAPES, (520, 8200, 1000), (1000, 8200, 600)]
CONFIG_PATTERNS = ["3:7", "16:32", "1:8", "2:4", "13:64"]
MATMUL_PATTERNS = ["1:4", "2:8", "3:7", "5:16", "16:32", "2:4", "31:64", "1:2"]


def _types() -> list[KernelTypes]:
    return [KernelTypes("f32", "f32", False), KernelTypes("f16", "f16", False), KernelTypes("f16", "f32", False),
            KernelTypes("bf16", "bf16", False)]


@pytest.fixture(scope="module", autouse=True)
def _precompiled():
    """Build every kernel this module runs in parallel first (bias does not change the source)."""
    bad = [r for r in precompile(kernel_ids()) if isinstance(r, Exception)]
    assert not bad, bad[:1]
    cutlass_nm.set_selector(lambda family, problem: None)  # heuristics, not the tuning DB
    yield
    cutlass_nm.set_selector(None)


def kernel_ids() -> list:
    """Every kernel this module runs (also read by benchmarks/precompile_tests.py: a cache built off the GPU)."""
    # the heuristic's stages and rows follow the weight's pattern and vector (what fits shared memory)
    kids = {(FAMILY.name, FAMILY.heuristic(Problem(m, n, k, t, p, v)), t) for m, n, k in SHAPES for t in _types()
            for p in MATMUL_PATTERNS for v in (1, 8, 32, 64)}
    kids |= {(FAMILY.name, FAMILY.heuristic(Problem(m, 512, 768, t, p, 32)), t) for m in (1, 3, 16) for t in _types()
             for p in ("5:16", "2:8")}
    kids |= {(FAMILY.name, c, KernelTypes("f32", "f32", False)) for c in CONFIGS}
    kids |= {(FAMILY.name, cfg, t) for t in _types() for cfg in (TRANSPOSED, COMPACT, TMA)}
    kids |= {(FAMILY.name, cfg, KernelTypes("f32", "f32", True)) for cfg in COMPACT_ONE_CONFIGS}
    kids |= {(FAMILY.name, cfg, replace(t, bias=True)) for cfg in CLUSTER_CONFIGS for t in _types()}
    kids |= {(FAMILY.name, cfg, replace(t, bias=True)) for cfg in KWARPS_CONFIGS for t in _types()}
    kids |= {(FAMILY.name, cfg, t) for cfg in (*FUSED_CONFIGS, *SPLIT_CONFIGS, *TAIL_CONFIGS, *CHAIN_CONFIGS)
             for t in (KernelTypes("f32", "f32", True), KernelTypes("f16", "f32", True))}
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


def _two_calls_match(shape, pattern, cfg, types, seed, refusals):
    """cfg with bias on weights of vector 32, called twice on one NaN-poisoned output, against the fp64 reference in
    the output type's tolerance; a config the family refuses for one of ``refusals`` is skipped."""
    m, n, k = shape
    types = replace(types, bias=True)
    if (reason := FAMILY.check(cfg, Problem(m, n, k, types, pattern, 32))) is not None:
        assert any(r in reason for r in refusals)
        pytest.skip(reason)
    dtype = {name: dt for dt, name in NAMES.items()}
    x, w, b, ref = _case(m, n, k, pattern, dtype[types.dtype], 32, seed=seed)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=dtype[types.out_dtype])
    kern = get_kernel((FAMILY.name, cfg, types))
    for _ in range(2):
        y.fill_(float("nan"))
        kern(x, w, b, y)
    torch.cuda.synchronize()
    assert torch.isfinite(y).all()
    assert _err(y, ref) < TOL[dtype[types.out_dtype]]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("pattern", MATMUL_PATTERNS)
@pytest.mark.parametrize("vector", [1, 8, 32, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=NAMES.get)
def test_matmul_matches_reference(shape, pattern, vector, dtype):
    m, n, k = shape
    x, w, b, ref = _case(m, n, k, pattern, dtype, vector)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    y = cutlass_nm.matmul(x, w, b, out=out, family="nm_simt")
    torch.cuda.synchronize()
    assert torch.isfinite(y).all()
    assert _err(y, ref) < TOL[dtype]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("pattern", ["1:4", "3:7", "5:16", "16:32", "2:4", "31:64"])
@pytest.mark.parametrize("vector", [1, 16, 32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=NAMES.get)
def test_transposed_x_matches_reference(shape, pattern, vector, dtype):
    """x_transposed = 1 (x^T staged column-major, float4 token reads), split-K 2, through the kernel directly."""
    m, n, k = shape
    x, w, b, ref = _case(m, n, k, pattern, dtype, vector, seed=11)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    get_kernel((FAMILY.name, TRANSPOSED, KernelTypes(NAMES[dtype], NAMES[dtype], True)))(x, w, b, y)
    torch.cuda.synchronize()
    assert torch.isfinite(y).all()
    assert _err(y, ref) < TOL[dtype]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("pattern", ["1:8", "4:32", "3:7", "5:16", "2:4", "13:64"])
@pytest.mark.parametrize("vector", [8, 32, 64, 128])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=NAMES.get)
def test_compact_matches_reference(shape, pattern, vector, dtype):
    """compact = 1 (x^T rows listed per CTA and k-tile, compact_layout), split-K 2, tails, through the kernel."""
    m, n, k = shape
    x, w, b, ref = _case(m, n, k, pattern, dtype, vector, seed=13)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    get_kernel((FAMILY.name, COMPACT, KernelTypes(NAMES[dtype], NAMES[dtype], True)))(x, w, b, y)
    torch.cuda.synchronize()
    assert torch.isfinite(y).all()
    assert _err(y, ref) < TOL[dtype]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("pattern", ["1:8", "4:32", "3:7", "5:16", "2:8", "16:32"])
@pytest.mark.parametrize("vector", [64, 128])
@pytest.mark.parametrize("cfg", COMPACT_ONE_CONFIGS, ids=["k64_split2", "k32"])
def test_compact_one_vector_a_cta_matches_reference(shape, pattern, vector, cfg):
    """compact = 1 with 128-row CTAs: vector 128 (one vector a CTA: a kept step per staged row) and 64 (two), fp32,
    tails, split-K 2 summed by atomics."""
    m, n, k = shape
    x, w, b, ref = _case(m, n, k, pattern, torch.float32, vector, seed=19)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    get_kernel((FAMILY.name, cfg, KernelTypes("f32", "f32", True)))(x, w, b, y)
    torch.cuda.synchronize()
    assert torch.isfinite(y).all()
    assert _err(y, ref) < TOL[torch.float32]


@pytest.mark.parametrize("shape", [*SHAPES, (1000, 2048, 2048)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("pattern", ["8:32", "4:32", "3:7", "5:16", "1:8", "16:32"])
@pytest.mark.parametrize("cfg", FUSED_CONFIGS, ids=["128x256", "128x256_split2", "256x128"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=NAMES.get)
def test_fused_transpose_matches_reference(shape, pattern, cfg, dtype):
    """fuse_x = 1: fp32 x transposed inside the GEMM by the producer warps, each k-tile's TMA box waiting for its
    pieces (k = 1003 and fp16 x take the transpose kernel instead); tails, split-K, fp32 output."""
    m, n, k = shape
    types = KernelTypes(NAMES[dtype], "f32", True)
    if (reason := FAMILY.check(cfg, Problem(m, n, k, types, pattern, 32))) is not None:
        assert "shared memory" in reason  # 16:32's k-tile does not fit the 3-stage 128 x 256 CTA: refused up front
        pytest.skip(reason)
    x, w, b, ref = _case(m, n, k, pattern, dtype, 32, seed=23)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    kern = get_kernel((FAMILY.name, cfg, types))
    for _ in range(2):  # the second call reuses the workspace: its piece counts must start from zero again
        y.fill_(float("nan"))
        kern(x, w, b, y)
    torch.cuda.synchronize()
    assert torch.isfinite(y).all()
    assert _err(y, ref) < TOL[torch.float32]  # by the output type


@pytest.mark.parametrize("shape", [*SHAPES, (1000, 2048, 2048)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("pattern", ["8:32", "4:32", "3:7", "16:32"])
@pytest.mark.parametrize("cfg", CLUSTER_CONFIGS, ids=["128x256_split4", "256x128_split3", "256x64_split2",
                                                      "cp_async_split2"])
@pytest.mark.parametrize("types", _types(), ids=lambda t: f"{t.dtype}_{t.out_dtype}")
def test_cluster_split_matches_reference(shape, pattern, cfg, types):
    """split_reduce = 2: the split's CTAs sum their tiles through distributed shared memory and store y in the output
    type (bias once); tails, splits with no k-tiles (k = 96), a second call on the same output."""
    _two_calls_match(shape, pattern, cfg, types, seed=29, refusals=("shared memory",))


@pytest.mark.parametrize("shape", [*SHAPES, (1000, 2048, 2048)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("pattern", ["4:32", "1:8", "3:7", "5:16", "16:32"])
@pytest.mark.parametrize("cfg", KWARPS_CONFIGS, ids=["tma_8x16", "tma_16x8_cluster2", "tma_8x16_atomics3",
                                                     "cp_async_split2", "heuristic_256", "heuristic_256_3stages"])
@pytest.mark.parametrize("types", _types(), ids=lambda t: f"{t.dtype}_{t.out_dtype}")
def test_k_warps_match_reference(shape, pattern, cfg, types):
    """k_warps = 2: each warp group takes a run of every k-tile's steps (uneven where the steps are not a multiple of
    8: 3:7, 5:16; the general path at k = 1003), then group 1's sums reach group 0 through shared memory; with
    split-K by cluster, atomics or partials; tails; two calls on one NaN-poisoned output."""
    _two_calls_match(shape, pattern, cfg, types, seed=37, refusals=("shared memory", "split_reduce=1"))


@pytest.mark.parametrize("shape", [*SHAPES, (1000, 2048, 2048)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("pattern", ["4:32", "3:7", "16:32"])
@pytest.mark.parametrize("cfg", SPLIT_CONFIGS, ids=["tma_atomics", "cp_async_atomics", "tma_partials"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=NAMES.get)
def test_split_sums_after_prep_kernel(shape, pattern, cfg, dtype):
    """Split-K sums where the kernel before the GEMM also zeroes y (atomics) or the reduction follows it under PDL;
    three calls on one NaN-poisoned output with new x each time (stale zeros or sums would show), tails."""
    _fresh_inputs_match(shape, pattern, cfg, dtype, seeds=(31, 32, 33))


def _fresh_inputs_match(shape, pattern, cfg, dtype, seeds):
    """cfg (fp32 output, bias, vector 32) on one NaN-poisoned output, a call per seed with new inputs, each against
    the fp64 reference; a config refused for shared memory is skipped."""
    m, n, k = shape
    types = KernelTypes(NAMES[dtype], "f32", True)
    if (reason := FAMILY.check(cfg, Problem(m, n, k, types, pattern, 32))) is not None:
        assert "shared memory" in reason
        pytest.skip(reason)
    kern = get_kernel((FAMILY.name, cfg, types))
    y = torch.empty((m, n), device="cuda", dtype=torch.float32)
    for seed in seeds:
        x, w, b, ref = _case(m, n, k, pattern, dtype, 32, seed=seed)
        y.fill_(float("nan"))
        kern(x, w, b, y)
        torch.cuda.synchronize()
        assert torch.isfinite(y).all()
        assert _err(y, ref) < TOL[torch.float32]


@pytest.mark.parametrize("shape", TAIL_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("pattern", ["8:32", "3:7", "16:32", "4:32"])
@pytest.mark.parametrize("cfg", TAIL_CONFIGS, ids=["tma_8x16_split3", "tma_16x8_split4", "k_warps_split2",
                                                   "k_warps_3stages_split3", "cp_async_split2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=NAMES.get)
def test_tail_split_matches_reference(shape, pattern, cfg, dtype):
    """split_reduce = 3: tiles of the GPU's full waves run whole k and store, the rest add k splits into y, of which
    only their token rows are zeroed; the large shapes have both kinds of tile. Three calls on one NaN-poisoned output
    with new x each time (an unzeroed row or a stale sum would show), tails, bias, fp16 x widened first."""
    _fresh_inputs_match(shape, pattern, cfg, dtype, seeds=(41, 42, 43))


@pytest.mark.parametrize("shape", TAIL_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("pattern", ["8:32", "1:4", "3:7", "5:16"])
@pytest.mark.parametrize("cfg", CHAIN_CONFIGS, ids=["whole", "cluster2", "tail3", "k96"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=NAMES.get)
def test_chained_8x16_matches_reference(shape, pattern, cfg, dtype):
    """chain = 1: a tile's last quad of steps reads the next tile's first fragments (3:7 and 5:16 with k-tiles of 24
    and 20 kept steps; k = 1003 runs the general path, unchained), with every split-sum kind; tails, three calls with
    new x on one NaN-poisoned output."""
    _fresh_inputs_match(shape, pattern, cfg, dtype, seeds=(51, 52, 53))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("pattern", ["1:8", "4:32", "3:7", "5:16", "2:4", "31:64"])
@pytest.mark.parametrize("vector", [1, 8, 16, 32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=NAMES.get)
def test_tma_matches_reference(shape, pattern, vector, dtype):
    """tma = 1 (x^T tiles and kept weights by TMA on sm_90; vector 1 runs the cp.async path), split-K 2, tails."""
    m, n, k = shape
    x, w, b, ref = _case(m, n, k, pattern, dtype, vector, seed=17)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    get_kernel((FAMILY.name, TMA, KernelTypes(NAMES[dtype], NAMES[dtype], True)))(x, w, b, y)
    torch.cuda.synchronize()
    assert torch.isfinite(y).all()
    assert _err(y, ref) < TOL[dtype]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "_".join(str(v) for v in c.to_record().values()))
@pytest.mark.parametrize("pattern", CONFIG_PATTERNS)
@pytest.mark.parametrize("vector", [8, 32])
def test_configs_fp32(cfg, pattern, vector):
    m, n, k = 200, 600, 2048
    types = KernelTypes("f32", "f32", True)
    if (reason := FAMILY.check(cfg, Problem(m, n, k, types, pattern, vector))) is not None:
        assert "shared memory" in reason  # the k-tile does not fit this pattern and vector: refused before launch
        pytest.skip(reason)
    x, w, b, ref = _case(m, n, k, pattern, torch.float32, vector, seed=3)
    y = torch.full((m, n), float("nan"), device="cuda")
    get_kernel((FAMILY.name, cfg, types))(x, w, b, y)
    torch.cuda.synchronize()
    assert torch.isfinite(y).all()
    assert _err(y, ref) < TOL[torch.float32]


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

"""N:M and V:N:M decode path on the GPU, both families (nm_decode: tensor cores, nm_decode_simt: CUDA cores):
random patterns (3:7, 5:16 ...), tails, m = 1..16, poisoned outputs, fp64 references."""

from __future__ import annotations

import logging

import pytest
import torch
from gpu_cases import pruned

import cutlass_nm
from cutlass_nm.arch import HOPPER

pytestmark = pytest.mark.gpu
TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
TC = cutlass_nm.families.get_family("nm_decode")  # modes 2 and 3
SIMT = cutlass_nm.families.get_family("nm_decode_simt")  # mode 0


def _family(cfg) -> str:
    """The decode family a config belongs to."""
    return SIMT.name if isinstance(cfg, SIMT.Config) else TC.name


@pytest.mark.parametrize("pattern", ["1:4", "2:8", "3:7", "5:16", "16:32", "7:64"])
@pytest.mark.parametrize("vector", [1, 32, 128])
@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_decode_matches_reference(pattern, vector, m, dtype):
    n, k = 1000, 1003  # neither is a multiple of anything
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    w, _ = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=dtype, generator=g), pattern, vector=vector)
    bias = torch.randn(n, device="cuda", dtype=dtype, generator=g)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    y = cutlass_nm.matmul(x, w, bias, out=out)
    ref = x.double() @ w.to_dense().double().T + bias.double()
    torch.cuda.synchronize()
    assert torch.isfinite(y).all()
    assert ((y.double() - ref).norm() / ref.norm()).item() < TOL[dtype]


def test_decode_fp32_out_and_m_limit():
    x = torch.randn(2, 512, device="cuda", dtype=torch.float16)
    w, _ = cutlass_nm.prune(torch.randn(256, 512, device="cuda", dtype=torch.float16), "2:8")
    for family in (TC.name, SIMT.name):
        y = cutlass_nm.matmul(x, w, out_dtype=torch.float32, family=family)
        ref = x.double() @ w.to_dense().double().T
        assert y.dtype == torch.float32 and ((y.double() - ref).norm() / ref.norm()).item() < 2e-3
        with pytest.raises(cutlass_nm.ShapeError, match="m <= 16"):
            cutlass_nm.matmul(torch.randn(17, 512, device="cuda", dtype=torch.float16), w, family=family)


VNM_CASES = [(SIMT.name, p, m) for p in ("64:2:8", "128:2:7", "32:2:10", "128:2:16") for m in (1, 5, 16)] + [
    (TC.name, p, 5) for p in ("64:2:8", "128:2:7", "32:2:10", "128:2:16")]


@pytest.mark.parametrize("family,pattern,m", VNM_CASES)
def test_decode_runs_vnm_weights(family, pattern, m):
    """A V:N:M weight forced on either decode family (its heuristic config): read as element-wise 2:M on CUDA
    cores, on sparse tensor cores (mode 3) by nm_decode; tails in n and k."""
    n, k = 520, 1003
    g = torch.Generator(device="cuda").manual_seed(11)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g)
    w = pruned(torch.randn(n, k, device="cuda", dtype=torch.float16, generator=g), pattern)  # V = 32 too
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    y = cutlass_nm.matmul(x, w, out=out, family=family)
    ref = x.double() @ w.to_dense().double().T
    assert torch.isfinite(y).all()
    assert ((y.double() - ref).norm() / ref.norm()).item() < 2e-3


@pytest.mark.parametrize("n,k", [(4096, 4096), (11008, 4096), (64, 16384)])
def test_decode_split_k_clusters(n, k):
    """Shapes whose plan splits k over a cluster of CTAs (and one with a single row block)."""
    x = torch.randn(3, k, device="cuda", dtype=torch.float16)
    w, _ = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16), "2:8", vector=1)
    y = cutlass_nm.matmul(x, w)
    ref = x.double() @ w.to_dense().double().T
    assert ((y.double() - ref).norm() / ref.norm()).item() < 2e-3


def _check_forced(cfg, pattern: str, vector: int, n: int, k: int, m: int, *, seed: int,
                  dtype: torch.dtype = torch.float16, with_bias: bool = False, warm: bool = False) -> None:
    """Run matmul with ``cfg`` forced on a random pruned weight into a NaN-poisoned output; compare with fp64.
    ``warm``: call once before (the first call on a weight builds its layout and launches without PDL)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    w = pruned(torch.randn(n, k, device="cuda", dtype=dtype, generator=g), pattern, vector)  # V = 32 too
    bias = torch.randn(n, device="cuda", dtype=dtype, generator=g) if with_bias else None
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    refused = []  # dispatch would fall back to the heuristic: the config under test must be the one that runs

    def select(family, problem):
        refused.append(family.check(cfg, problem))
        return cfg

    cutlass_nm.set_selector(select)
    try:
        if warm:
            cutlass_nm.matmul(x, w, bias, out=out, family=_family(cfg))
            out.fill_(float("nan"))
        y = cutlass_nm.matmul(x, w, bias, out=out, family=_family(cfg))
    finally:
        cutlass_nm.set_selector(None)
    ref = x.double() @ w.to_dense().double().T + (0 if bias is None else bias.double())
    assert refused and not any(refused), refused
    assert torch.isfinite(y).all()
    assert ((y.double() - ref).norm() / ref.norm()).item() < TOL[dtype]


ONE_TOKEN_VARIANTS = [(warps, rows, ahead, tr) for warps, rows in ((4, 1), (16, 2), (8, 2))
                      for ahead in (1, 2) for tr in (0, 1)]


@pytest.mark.parametrize("variant", ONE_TOKEN_VARIANTS, ids=lambda v: "w{}r{}a{}t{}".format(*v))
@pytest.mark.parametrize("pattern,vector,n,k", [("3:7", 1, 1000, 1003), ("1:8", 8, 333, 5000),
                                                ("7:64", 1, 130, 2051), ("2:8", 1, 64, 16384)])
def test_one_token_variants(variant, pattern, vector, n, k):
    """Every one-token code path of mode 0 (x read from L1, 1 or 2 chunks in flight, transposed gathers), with
    tails in n and k, groups that straddle 32-position steps (3:7), shared indices, and a split-K shape."""
    warps, rows, ahead, tr = variant
    cfg = SIMT.Config(max_tokens=1, warps=warps, rows=rows, ahead=ahead, transpose=tr)
    _check_forced(cfg, pattern, vector, n, k, 1, seed=5)


MULTI_TOKEN_VARIANTS = [(tokens, m, rows, tr) for tokens, m in ((2, 2), (4, 3), (8, 5), (16, 16))
                        for rows in (1, 2) for tr in (0, 1)]


@pytest.mark.parametrize("variant", MULTI_TOKEN_VARIANTS, ids=lambda v: "T{}m{}r{}t{}".format(*v))
@pytest.mark.parametrize("pattern,vector,n,k", [("3:7", 1, 1000, 1003), ("1:8", 8, 333, 5000),
                                                ("2:8", 1, 64, 16384)])
def test_multi_token_variants(variant, pattern, vector, n, k):
    """Several tokens: the swizzled staged x read by plain and transposed gathers, with tails, shared indices,
    groups straddling 32-position steps and a split-K shape."""
    tokens, m, rows, tr = variant
    cfg = SIMT.Config(max_tokens=tokens, warps=8, rows=rows, transpose=tr)
    _check_forced(cfg, pattern, vector, n, k, m, seed=9)


MODE2_VARIANTS = [(tokens, m, warps, ahead, bulk) for tokens, m in ((1, 1), (4, 3), (8, 8), (16, 11), (16, 16))
                  for warps, ahead in ((4, 1), (8, 2), (16, 1)) for bulk in (0, 1)]


@pytest.mark.parametrize("variant", MODE2_VARIANTS, ids=lambda v: "T{}m{}w{}a{}b{}".format(*v))
@pytest.mark.parametrize("pattern,vector,n,k", [("3:7", 32, 1000, 1003), ("5:16", 64, 520, 4096),
                                                ("2:8", 32, 64, 16384), ("16:32", 32, 100, 1024),
                                                ("1:8", 64, 4096, 4096)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mode2_tensor_core_variants(variant, pattern, vector, n, k, dtype):
    """Tensor cores (mma.m16n8k16, x columns gathered by ldmatrix): one or two n8 tiles, tails in n (1000, 520,
    100), m and k (1003: x staged a column at a time), groups straddling 16-position steps (3:7, 5:16), steps in
    flight past a piece's end, split-K (64 x 16384), fp16 and bf16; values in registers or by TMA bulk copies into
    a ring (bulk = 1), whose warps past the last row block re-read the last block."""
    tokens, m, warps, ahead, bulk = variant
    cfg = TC.Config(max_tokens=tokens, warps=warps, ahead=ahead, mode=2, bulk=bulk)
    _check_forced(cfg, pattern, vector, n, k, m, seed=17, dtype=dtype, with_bias=True)


def test_unshared_indices_run_on_cuda_cores(caplog):
    """A weight whose indices are not shared by 32 rows: matmul routes it to nm_decode_simt, which refuses a
    tensor-core config offered for it (warns, runs its heuristic config, the result is right); forced onto
    nm_decode, every config is refused with the reason and the family that runs it."""
    caplog.set_level(logging.DEBUG, logger="cutlass_nm.dispatch")  # a family warns once a session, then debug
    cfg = TC.Config(max_tokens=8, mode=2)
    x = torch.randn(4, 512, device="cuda", dtype=torch.float16)
    w, _ = cutlass_nm.prune(torch.randn(256, 512, device="cuda", dtype=torch.float16), "2:8", vector=8)
    families = []
    cutlass_nm.set_selector(lambda family, problem: families.append(family.name) or cfg)
    try:
        y = cutlass_nm.matmul(x, w)
        with pytest.raises(cutlass_nm.ShapeError, match=r"multiple of 32.*nm_decode_simt"):
            cutlass_nm.matmul(x, w, family=TC.name)
    finally:
        cutlass_nm.set_selector(None)
    assert families == [SIMT.name, TC.name] and "its own Config" in caplog.text
    ref = x.double() @ w.to_dense().double().T
    assert ((y.double() - ref).norm() / ref.norm()).item() < 2e-3


@pytest.mark.parametrize("bulk", [0, 1])
def test_mode2_several_x_pieces(bulk):
    """A CTA whose k-range does not fit shared memory at once: x staged in two pieces, the (group, place) of each
    lane's position restarted per piece (16 tokens, no cluster, a tail in n); with bulk = 1 the ring's copies run
    ahead across the piece boundary."""
    from cutlass_nm.families.nm_decode.family import plan

    cfg = TC.Config(max_tokens=16, warps=4, ahead=2, mode=2, bulk=bulk, split=1)
    n, k = 1000, 4096
    split, piece, _ = plan(cfg, n, k // 8 * 2, 2, 8, HOPPER.sm_count)
    assert (split, -(-(k // 8 * 2 // 16) // piece)) == (1, 2)  # the case this test is for
    _check_forced(cfg, "2:8", 32, n, k, 16, seed=19, with_bias=True)


LAUNCH_VARIANTS = [(mode, split) for mode in (0, 2) for split in (1, 2, 8)]


@pytest.mark.parametrize("variant", LAUNCH_VARIANTS, ids=lambda v: "mode{}s{}".format(*v))
def test_launch_options(variant):
    """A fixed split (1, 2 and 8 CTAs per cluster along k) in modes 0 and 2, the first call without programmatic
    dependent launch and the second with it, tails in n, m and k and a bias."""
    mode, split = variant
    cfg = (TC.Config(max_tokens=4, warps=4, ahead=2, mode=mode, split=split) if mode else
           SIMT.Config(max_tokens=4, warps=4, ahead=2, split=split))
    _check_forced(cfg, "3:7", 32, 1000, 4093, 3, seed=23, with_bias=True, warm=True)


STREAM_VARIANTS = [(mode, tokens, m, prefetch, ctas, early) for mode in (2, 3)
                   for tokens, m, prefetch, ctas, early in ((8, 1, 4, 3, 1), (16, 13, 4, 3, 1), (8, 3, 4, 0, 0),
                                                            (16, 16, 4, 4, 1), (8, 8, 0, 2, 1))]


@pytest.mark.parametrize("variant", STREAM_VARIANTS, ids=lambda v: "mode{}T{}m{}p{}c{}e{}".format(*v))
@pytest.mark.parametrize("n,k", [(1000, 1003), (64, 16384), (520, 4096)])
def test_stream_options(variant, n, k):
    """Modes 2 and 3 with an L2 prefetch window (4 steps, sliding past x pieces and split-K shares: 64 x 16384),
    registers bounded for 2-4 CTAs per SM and the next launch released at entry; tails in n, m and k, a bias,
    PDL on the second call."""
    mode, tokens, m, prefetch, ctas, early = variant
    cfg = TC.Config(max_tokens=tokens, warps=8, ahead=2, mode=mode, prefetch=prefetch, ctas=ctas, early_release=early)
    pattern, vector = ("128:2:7", 32) if mode == 3 else ("3:7", 32)
    _check_forced(cfg, pattern, vector, n, k, m, seed=37, with_bias=True, warm=True)


CHAIN_CONFIGS = {"mode2": TC.Config(max_tokens=8, warps=8, ahead=2, mode=2),
                 "mode2_stream": TC.Config(max_tokens=8, warps=8, ahead=2, mode=2, prefetch=4, ctas=3, early_release=1),
                 "mode2_bulk": TC.Config(max_tokens=8, warps=8, ahead=2, mode=2, bulk=1),
                 "mode0": SIMT.Config(max_tokens=2, warps=8, rows=1),
                 "mode0_one_token": SIMT.Config(max_tokens=1, warps=4),
                 "mode2_push": TC.Config(max_tokens=8, warps=8, ahead=2, mode=2, prefetch=4, ctas=3, early_release=1,
                                         push=1),
                 "mode2_one_token_early": TC.Config(max_tokens=1, warps=8, ahead=1, mode=2, prefetch=4, wsplit=8,
                                                    ctas=3, early_release=1, push=1)}


@pytest.mark.parametrize("name", CHAIN_CONFIGS)
def test_pdl_chain_reads_the_previous_output(name):
    """Programmatic dependent launch: each call's x is the previous call's output, launched back to back (eagerly
    and replayed from a CUDA graph), so a kernel that read x before its predecessor finished would be caught.
    The weights differ per call; results are compared with an fp64 chain."""
    n = 4096
    cfg = CHAIN_CONFIGS[name]
    m = 1 if cfg.max_tokens == 1 else 2
    g = torch.Generator(device="cuda").manual_seed(29)
    ws = [cutlass_nm.prune(torch.randn(n, n, device="cuda", dtype=torch.float16, generator=g) / 32, "2:8")[0]
          for _ in range(6)]
    x0 = torch.randn(m, n, device="cuda", dtype=torch.float16, generator=g)

    def chain(x):
        for w in ws:
            x = cutlass_nm.matmul(x, w, family=_family(cfg))
        return x

    ref = x0.double()
    for w in ws:
        ref = ref @ w.to_dense().double().T
    cutlass_nm.set_selector(lambda family, problem: cfg)
    try:
        chain(x0)  # builds each weight's layout (those calls launch without PDL)
        eager = chain(x0)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            chain(x0)  # warm (allocator, first launches) outside capture
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            replayed = chain(x0)
        replayed.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
    finally:
        cutlass_nm.set_selector(None)
    for y in (eager, replayed):
        assert torch.isfinite(y).all()
        assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-2


MODE3_VARIANTS = [(tokens, m, warps, ahead) for tokens, m in ((8, 1), (8, 5), (16, 16))
                  for warps, ahead in ((4, 2), (8, 1))]


@pytest.mark.parametrize("variant", MODE3_VARIANTS, ids=lambda v: "T{}m{}w{}a{}".format(*v))
@pytest.mark.parametrize("pattern,n,k", [("128:2:8", 520, 1003), ("64:2:7", 1000, 4093), ("32:2:10", 100, 1024),
                                         ("128:2:16", 64, 16384)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mode3_sparse_tensor_core_variants(variant, pattern, n, k, dtype):
    """V:N:M on sparse tensor cores (mma.sp.m16n8k32 over 8 groups, the V-block's gathered x columns by
    ldmatrix): V = 32, 64, 128, M = 7, 8, 10, 16; tails in n, m and k (groups padded to 8 per step), split-K
    (64 x 16384), fp16 and bf16, a bias, and PDL on the second call."""
    tokens, m, warps, ahead = variant
    cfg = TC.Config(max_tokens=tokens, warps=warps, ahead=ahead, mode=3)
    _check_forced(cfg, pattern, 32, n, k, m, seed=31, dtype=dtype, with_bias=True, warm=True)


@pytest.mark.parametrize("mode,pattern", [(0, "3:7"), (2, "3:7"), (3, "128:2:7")])
def test_ctas_cap(mode, pattern):
    """Exactly 2 CTAs per SM (nm_decode's ctas = -2: registers for 2, shared memory padded so a third does not
    fit; nm_decode_simt's max_ctas = 2, one token and several): the same results, tails, a bias, PDL."""
    if mode == 0:
        for tokens, m in ((1, 1), (4, 3)):
            cfg = SIMT.Config(max_tokens=tokens, warps=8, rows=2, max_ctas=2)
            _check_forced(cfg, pattern, 1, 1000, 4093, m, seed=43, with_bias=True, warm=True)
        return
    cfg = TC.Config(max_tokens=8, warps=8, ahead=2, mode=mode, ctas=-2)
    _check_forced(cfg, pattern, 32, 1000, 4093, 3, seed=43, with_bias=True, warm=True)


WSPLIT_VARIANTS = [(2, 1, 1, 8, 1, 4), (2, 4, 3, 4, 0, 0), (2, 8, 8, 4, 0, 4), (2, 16, 13, 8, 1, 0),
                   (2, 2, 2, 8, 0, 0), (3, 8, 5, 8, 1, 4), (3, 16, 16, 4, 0, 0), (3, 1, 1, 8, 1, 0), (3, 4, 3, 4, 0, 0)]


@pytest.mark.parametrize("variant", WSPLIT_VARIANTS, ids=lambda v: "mode{}T{}m{}w{}s{}p{}".format(*v))
@pytest.mark.parametrize("n,k", [(1000, 1003), (64, 16384), (520, 4096), (2080, 16384)])
def test_wsplit_variants(variant, n, k):
    """wsplit = W warps (of 8) splitting a 32-row block's steps, summed in shared memory: with and without a
    cluster (split 1 or plan's rule), narrow x (below 8 tokens), L2 prefetch windows inside a warp's part,
    pieces (16 tokens at k = 16384 on one CTA: several x pieces), tails in n, m and k, a bias, PDL."""
    mode, tokens, m, wsplit, split, prefetch = variant
    cfg = TC.Config(max_tokens=tokens, warps=8, ahead=2, mode=mode, split=split, prefetch=prefetch, ctas=3,
                    wsplit=wsplit)
    pattern = "128:2:7" if mode == 3 else "3:7"
    _check_forced(cfg, pattern, 32, n, k, m, seed=47, with_bias=True, warm=True)


@pytest.mark.parametrize("pattern", ["2:8", "5:16", "128:2:7"])
def test_one_token_heuristic_on_a_large_weight(pattern):
    """matmul's own choice at one token on >= 4096 rows and 2^25 weights (narrow x, wsplit 8, no cluster; mode 2
    for N:M, mode 3 for V:N:M), with tails in n and k, against fp64 into a poisoned output."""
    n, k = 4100, 8200
    vnm = cutlass_nm.Pattern.parse(pattern).is_vnm
    fam = TC
    types = cutlass_nm.families.KernelTypes("f16", "f16", True)
    cfg = fam.heuristic(cutlass_nm.families.Problem(1, n, k, types, pattern, 0 if vnm else 32))
    assert (cfg.wsplit, cfg.mode) == (8, 3 if vnm else 2)
    g = torch.Generator(device="cuda").manual_seed(53)
    x = torch.randn(1, k, device="cuda", dtype=torch.float16, generator=g)
    dense = torch.randn(n, k, device="cuda", dtype=torch.float16, generator=g)
    w, _ = cutlass_nm.prune(dense, pattern) if vnm else cutlass_nm.prune(dense, pattern, vector=32)
    bias = torch.randn(n, device="cuda", dtype=torch.float16, generator=g)
    for _ in range(2):  # the second call launches with PDL
        out = torch.full((1, n), float("nan"), device="cuda", dtype=torch.float16)
        y = cutlass_nm.matmul(x, w, bias, out=out)
        ref = x.double() @ w.to_dense().double().T + bias.double()
        assert torch.isfinite(y).all()
        assert ((y.double() - ref).norm() / ref.norm()).item() < 2e-3


PUSH_VARIANTS = [(0, 4, 3, 1, 4, 0), (0, 1, 1, 1, 2, 0), (2, 8, 5, 1, 8, 0), (2, 16, 13, 1, 8, 0), (2, 16, 16, 2, 4, 0),
                 (3, 8, 1, 1, 8, 0), (3, 16, 16, 1, 2, 0), (2, 1, 1, 8, 4, 0), (2, 8, 6, 1, 8, 1), (2, 16, 11, 1, 4, 1)]


def push_config(variant):
    """The config a PUSH_VARIANTS entry (mode, tokens, m, wsplit, split, bulk) tests (also
    precompile_decode_tests.py)."""
    mode, tokens, _, wsplit, split, bulk = variant
    if mode == 0:
        return SIMT.Config(max_tokens=tokens, warps=8, ahead=2, split=split, push=1)
    return TC.Config(max_tokens=tokens, warps=8, ahead=1 if tokens == 1 else 2, mode=mode, split=split,
                     prefetch=4 if mode == 2 and not bulk else 0, ctas=3, wsplit=wsplit, bulk=bulk, push=1)


@pytest.mark.parametrize("variant", PUSH_VARIANTS, ids=lambda v: "mode{}T{}m{}w{}s{}b{}".format(*v))
@pytest.mark.parametrize("n,k", [(1000, 1003), (64, 16384), (520, 4096)])
def test_push_reduction(variant, n, k):
    """push = 1: a cluster's sums pushed into their owner's shared memory (st.async, one mbarrier per owner) in
    every mode, 1-16 tokens (float4 sums at 16), warps sharing a block (wsplit), bulk rings, clusters of 2-8 CTAs
    and, where k allows fewer, a smaller split; tails in n, m and k, a bias, PDL on the second call."""
    pattern = "128:2:7" if variant[0] == 3 else "3:7"
    _check_forced(push_config(variant), pattern, 32, n, k, variant[2], seed=59, with_bias=True, warm=True)

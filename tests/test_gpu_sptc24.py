"""2:4 kernels on the GPU against an fp32 reference: random inputs, poisoned outputs, tails, m = 1."""

from __future__ import annotations

import os

import pytest
import torch
from gpu_cases import case, rel_err

import cutlass_nm
from cutlass_nm import InputError, ShapeError

pytestmark = pytest.mark.gpu

# (m, n, k): m = 1, tails in every dimension (not multiples of any tile), and a larger aligned one.
# k % 64 == 0 and n % 32 == 0 (CUTLASS's sm80 SparseGemm rules) so that both families take every
# shape, none a multiple of any tile in m; sm90 also takes k % 64 == 16 and n % 32 == 8, tested below.
SHAPES = [(1, 256, 512), (7, 288, 384), (129, 544, 1088), (300, 1056, 2112), (1024, 4096, 4096)]
TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _case(m, n, k, dtype, seed, with_bias):
    return case(m, n, k, "2:4", dtype, seed, with_bias)


def _families() -> list[str]:
    if not torch.cuda.is_available():  # collected, then skipped by the gpu marker with its reason
        return ["sptc24_sm90", "sptc24_sm80"]
    cap = torch.cuda.get_device_capability()
    names = (["sptc24_sm90"] if cap == (9, 0) else []) + (["sptc24_sm80"] if cap >= (8, 0) else [])
    only = os.environ.get("CUTLASS_NM_TEST_FAMILIES")  # e.g. "sptc24_sm90": test (and build) only these
    return [n for n in names if not only or n in only.split(",")]


@pytest.fixture(scope="module", autouse=True)
def _precompile_in_parallel():
    """Build every kernel these tests reach at once, on all cores, instead of one by one."""
    from cutlass_nm.families import KernelTypes, Problem, get_family
    from cutlass_nm.kernels import precompile

    problems = [(m, n, k, d, o, b) for m, n, k in SHAPES for d in ("f16", "bf16") for b in (False, True)
                for o in (d,)] + [(96, 544, 1088, "bf16", "f32", True), (16, 1024, 1024, "f16", "f16", False),
                                  (4096, 1024, 1024, "f16", "f16", False)]
    if not torch.cuda.is_available():
        return
    kids = set()
    for name in _families():
        fam = get_family(name)
        for m, n, k, d, o, b in problems:
            types = KernelTypes(d, o, b)
            kids.add((name, fam.heuristic(Problem(m, n, k, types)), types))
    if "sptc24_sm90" in _families():
        sm90 = get_family("sptc24_sm90")
        kids.update(("sptc24_sm90", sm90.Config(**f, mma_pipe=1), KernelTypes("f16", "f16", False)) for f in PIPELINED)
        kids.add(("sptc24_sm90", sm90.Config(**PIPELINED[0], mma_pipe=1), KernelTypes("bf16", "f32", True)))
    failures = [r for r in precompile(sorted(kids, key=str)) if isinstance(r, Exception)]
    assert not failures, failures[0]


@pytest.mark.parametrize("family", _families())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_reference(family, dtype, shape, with_bias):
    m, n, k = shape
    x, w, bias, ref = _case(m, n, k, dtype, seed=hash((family, shape, with_bias)) % 2**31, with_bias=with_bias)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)  # poison
    y = cutlass_nm.matmul(x, w, bias, out=out, family=family)
    torch.cuda.synchronize()
    assert y.data_ptr() == out.data_ptr()
    assert torch.isfinite(y).all(), "unwritten (poisoned) or non-finite outputs"
    assert rel_err(y, ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(3, 264, 336), (130, 1000, 1040)], ids=lambda s: "x".join(map(str, s)))
def test_sm90_k_tails(dtype, shape):
    if "sptc24_sm90" not in _families():
        pytest.skip("needs an sm_90 GPU")
    x, w, bias, ref = _case(*shape, dtype, seed=11, with_bias=True)
    out = torch.full(shape[:1] + shape[1:2], float("nan"), device="cuda", dtype=dtype)
    y = cutlass_nm.matmul(x, w, bias, out=out, family="sptc24_sm90")
    assert torch.isfinite(y).all() and rel_err(y, ref) < TOL[dtype]


@pytest.mark.parametrize("family", _families())
def test_fp32_output_and_batched_input(family):
    x, w, bias, ref = _case(96, 544, 1088, torch.bfloat16, seed=3, with_bias=True)
    y = cutlass_nm.matmul(x.reshape(4, 24, 1088), w, bias, out_dtype=torch.float32, family=family)
    assert y.shape == (4, 24, 544) and y.dtype == torch.float32
    assert rel_err(y.reshape(96, 544), ref) < TOL[torch.bfloat16]


@pytest.mark.parametrize("family", _families())
def test_heuristic_configs_of_both_m_regimes(family):
    for m in (16, 4096):
        x, w, _, ref = _case(m, 1024, 1024, torch.float16, seed=m, with_bias=False)
        assert rel_err(cutlass_nm.matmul(x, w, family=family), ref) < TOL[torch.float16]


def test_gpu_error_paths():
    x, w, _, _ = _case(8, 256, 512, torch.float16, seed=0, with_bias=False)
    with pytest.raises(InputError, match="CUDA tensor"):
        cutlass_nm.matmul(x.cpu(), w)
    with pytest.raises(InputError, match="contiguous"):
        cutlass_nm.matmul(torch.randn(512, 8, device="cuda", dtype=torch.float16).T, w)
    with pytest.raises(InputError, match="aligned"):
        buf = torch.randn(8 * 512 + 1, device="cuda", dtype=torch.float16)
        cutlass_nm.matmul(buf[1:].view(8, 512), w)
    with pytest.raises(InputError, match="device mismatch"):
        cutlass_nm.matmul(x, w.to("cpu"))
    with pytest.raises(InputError, match="dtype mismatch"):
        cutlass_nm.matmul(x.bfloat16(), w)
    with pytest.raises(InputError, match="out must be"):
        cutlass_nm.matmul(x, w, out=torch.empty(8, 255, device="cuda", dtype=torch.float16))
    wk = cutlass_nm.compress(torch.randn(256, 520, device="cuda", dtype=torch.float16), prune=True)
    for family, rule in (("sptc24_sm90", "multiple of 16"), ("sptc24_sm80", "tile K")):
        if family in _families():
            with pytest.raises(ShapeError, match=rule):
                cutlass_nm.matmul(torch.randn(8, 520, device="cuda", dtype=torch.float16), wk, family=family)
    wn = cutlass_nm.compress(torch.randn(260, 512, device="cuda", dtype=torch.float16), prune=True)
    with pytest.raises(ShapeError, match="multiple of 8"):
        cutlass_nm.matmul(torch.randn(8, 512, device="cuda", dtype=torch.float16), wn)


# Our pipelined sparse mainloop (mma_pipe = 1) across schedules, tile K, clusters and stream-K; k-tile counts of
# 1, even and odd, and tails in every dimension. Kernels built directly from their configs.
PIPELINED = [
    dict(tile_m=256, tile_n=128, tile_k=128, cluster_m=1, cluster_n=1),
    dict(tile_m=128, tile_n=256, tile_k=64, cluster_m=2, cluster_n=1),
    dict(tile_m=256, tile_n=128, tile_k=64, cluster_m=1, cluster_n=2, scheduler="streamk"),
    dict(tile_m=128, tile_n=128, tile_k=64, cluster_m=1, cluster_n=1, schedule="pingpong"),
    dict(tile_m=128, tile_n=64, tile_k=128, cluster_m=2, cluster_n=1),
]
PIPELINED_SHAPES = [(1, 256, 64), (7, 288, 384), (129, 544, 1088), (300, 1056, 2112), (2048, 2048, 4096)]


@pytest.mark.parametrize("fields", PIPELINED, ids=lambda f: "_".join(str(v) for v in f.values()))
@pytest.mark.parametrize("shape", PIPELINED_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_pipelined_mainloop(fields, shape):
    if "sptc24_sm90" not in _families():
        pytest.skip("needs an sm_90 GPU")
    from cutlass_nm.families import KernelTypes, get_family
    from cutlass_nm.kernels import get_kernel

    fam = get_family("sptc24_sm90")
    cfg = fam.Config(**fields, mma_pipe=1)
    m, n, k = shape
    for dtype, out_dtype, with_bias in ((torch.float16, torch.float16, False), (torch.bfloat16, torch.float32, True)):
        if dtype == torch.bfloat16 and fields != PIPELINED[0]:
            continue  # one bf16 + bias + fp32-output kernel is enough to cover the epilogue variants
        names = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}
        kern = get_kernel((fam.name, cfg, KernelTypes(names[dtype], names[out_dtype], with_bias)))
        x, w, bias, ref = _case(m, n, k, dtype, seed=hash((str(fields), shape)) % 2**31, with_bias=with_bias)
        y = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
        kern(x, w, bias, y)
        torch.cuda.synchronize()
        assert torch.isfinite(y).all(), "unwritten (poisoned) or non-finite outputs"
        assert rel_err(y, ref) < TOL[dtype], (cfg, dtype)


@pytest.mark.parametrize("shape", [(1, 256, 2048), (16, 1024, 4096), (129, 544, 1088)],
                         ids=lambda s: "x".join(map(str, s)))
def test_streamk_repeats_and_replays(shape):
    """A stream-K problem (its parameters and workspace set up on every call) gives the reference on every call with
    fresh x, and as a CUDA graph replayed twice."""
    if "sptc24_sm90" not in _families():
        pytest.skip("needs an sm_90 GPU")
    from cutlass_nm.families import KernelTypes, get_family
    from cutlass_nm.kernels import get_kernel

    fam = get_family("sptc24_sm90")
    kern = get_kernel((fam.name, fam.Config(**PIPELINED[2], mma_pipe=1), KernelTypes("f16", "f16", True)))
    m, n, k = shape
    for seed in range(3):
        x, w, bias, ref = _case(m, n, k, torch.float16, seed=70 + seed, with_bias=True)
        for _ in range(2):
            y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
            kern(x.clone(), w, bias, y)
            torch.cuda.synchronize()
            assert torch.isfinite(y).all() and rel_err(y, ref) < TOL[torch.float16]
    assert all(type(nbytes) is int and nbytes > 0 for nbytes in kern.plans.values()), "no stream-K split here"
    static_x, static_y = x.clone(), torch.empty(m, n, device="cuda", dtype=torch.float16)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kern(static_x, w, bias, static_y)
    for _ in range(2):
        static_y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.isfinite(static_y).all() and rel_err(static_y, ref) < TOL[torch.float16]


def test_sm90_plan_follows_new_inputs_outputs_and_weights():
    """A cached plan (one per weight, bias and m) patches x's and y's addresses per call: fresh x and out tensors,
    a second weight of the same shape and a bias each give their own reference."""
    if "sptc24_sm90" not in _families():
        pytest.skip("needs an sm_90 GPU")
    m, n, k = 16, 1024, 1024
    cases = [_case(m, n, k, torch.float16, seed=s, with_bias=s % 2 == 1) for s in range(4)]
    for _ in range(2):  # the second round reuses every plan
        for x, w, bias, ref in cases:
            for _ in range(2):
                xc = x.clone()  # a new address
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
                y = cutlass_nm.matmul(xc, w, bias, out=out, family="sptc24_sm90")
                assert torch.isfinite(y).all() and rel_err(y, ref) < TOL[torch.float16]


def test_sm90_plan_under_cuda_graph_then_eager():
    """A graph captured through a plan replays on its own buffers; eager calls after it still follow their inputs."""
    if "sptc24_sm90" not in _families():
        pytest.skip("needs an sm_90 GPU")
    x, w, _, ref = _case(16, 1024, 1024, torch.float16, seed=21, with_bias=False)
    x2, _, _, _ = _case(16, 1024, 1024, torch.float16, seed=22, with_bias=False)
    static_x = x.clone()
    cutlass_nm.matmul(static_x, w, family="sptc24_sm90")  # warm: the plan exists before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = cutlass_nm.matmul(static_x, w, family="sptc24_sm90")
    eager = cutlass_nm.matmul(x2, w, family="sptc24_sm90")
    static_y.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(static_y, ref) < TOL[torch.float16]
    assert rel_err(eager, x2.double() @ w.to_dense().double().T) < TOL[torch.float16]


def test_steady_state_calls_still_check_what_may_differ():
    """After a call has been remembered on the weight, a tensor of the same signature that is non-contiguous or
    misaligned, another dtype, another bias, and a 3-D x each get matmul's full handling."""
    x, w, bias, ref = _case(32, 512, 1024, torch.float16, seed=31, with_bias=True)
    for _ in range(2):
        assert rel_err(cutlass_nm.matmul(x, w, bias), ref) < TOL[torch.float16]
    wide = torch.randn(1024, 32, device="cuda", dtype=torch.float16).t()  # (32, 1024), not contiguous
    with pytest.raises(InputError, match="contiguous"):
        cutlass_nm.matmul(wide, w, bias)
    buf = torch.randn(32 * 1024 + 4, device="cuda", dtype=torch.float16)
    with pytest.raises(InputError, match="aligned"):
        cutlass_nm.matmul(buf[4:].view(32, 1024), w, bias)
    with pytest.raises(InputError, match="dtype"):
        cutlass_nm.matmul(x.bfloat16(), w, bias)
    other = torch.randn(512, device="cuda", dtype=torch.float16)
    y = cutlass_nm.matmul(x, w, other)
    assert rel_err(y, ref - bias.double() + other.double()) < TOL[torch.float16]
    y3 = cutlass_nm.matmul(x.view(4, 8, 1024), w, bias)
    assert y3.shape == (4, 8, 512) and rel_err(y3.reshape(32, 512), ref) < TOL[torch.float16]
    y3 = cutlass_nm.matmul(x.view(4, 8, 1024), w, bias)  # the remembered 3-D call
    assert rel_err(y3.reshape(32, 512), ref) < TOL[torch.float16]
    bias.data = torch.zeros(256, device="cuda", dtype=torch.float16)  # the same object, other data: checked again
    with pytest.raises(InputError, match="bias must be a tensor of shape"):
        cutlass_nm.matmul(x, w, bias)


# sptc24_sm80's plan path: m % 8 != 0 (13) makes the GEMM read x's m rows and write a scratch of ldd = 16 rows
SM80_PLAN_MS = [1, 8, 13, 96]
SM80_NK = (544, 1088)  # n = 8.5 transpose tiles of 64 features, k = 17 k-tiles


def _sm80_launcher(m: int, dtype: torch.dtype, with_bias: bool):
    """The sptc24_sm80 launcher of the heuristic config for (m, SM80_NK), built by the module's precompile."""
    from cutlass_nm.families import KernelTypes, Problem, get_family
    from cutlass_nm.kernels import get_kernel

    if "sptc24_sm80" not in _families():
        pytest.skip("needs an sm_80 or newer GPU")
    name = {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
    types = KernelTypes(name, name, with_bias)
    fam = get_family("sptc24_sm80")
    return get_kernel((fam.name, fam.heuristic(Problem(m, *SM80_NK, types)), types))


def _fresh_x(m: int, dtype: torch.dtype, g: torch.Generator, w, bias: torch.Tensor | None):
    """A new random x (m x k) for w and its fp64 reference x·Wᵀ (+ bias)."""
    x = torch.randn(m, w.in_features, device="cuda", dtype=dtype, generator=g)
    ref = x.double() @ w.to_dense().double().T
    return x, ref if bias is None else ref + bias.double()


def _check(y: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: object) -> None:
    torch.cuda.synchronize()
    assert torch.isfinite(y).all(), f"unwritten (poisoned) or non-finite outputs: {what}"
    assert rel_err(y.reshape(ref.shape), ref) < TOL[dtype], what


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("m", SM80_PLAN_MS)
def test_sm80_plan_and_repeat_on_new_inputs(m, dtype, with_bias):
    """sptc24_sm80 runs each (weight, bias, m) from one plan: the launcher's calls and its steady repeat into one
    reused NaN-poisoned output, and matmul's repeat of a remembered call, each on a fresh x, give the fp64
    reference (x read in place for any m, the transpose and the bias fused into the same launch)."""
    kern = _sm80_launcher(m, dtype, with_bias)
    _, w, bias, _ = _case(m, *SM80_NK, dtype, seed=500 + m, with_bias=with_bias)
    g = torch.Generator(device="cuda").manual_seed(600 + m)
    out = torch.full((m, SM80_NK[0]), float("nan"), device="cuda", dtype=dtype)
    x, ref = _fresh_x(m, dtype, g, w, bias)
    kern(x, w, bias, out)
    _check(out, ref, dtype, "first call")
    planned = len(kern.plans)
    go = kern.steady(x, w, bias, out)
    assert go is not kern, "a planned call must be repeated from its plan"
    for step in range(3):
        for call in (go, kern):
            x, ref = _fresh_x(m, dtype, g, w, bias)
            out.fill_(float("nan"))
            call(x, w, bias, out)
            _check(out, ref, dtype, (step, call))
    assert len(kern.plans) == planned, "new x and y addresses must reuse the plan"
    for step in range(3):  # matmul: the first call is remembered, the next ones run its repeat
        x, ref = _fresh_x(m, dtype, g, w, bias)
        _check(cutlass_nm.matmul(x, w, bias, family="sptc24_sm80"), ref, dtype, ("matmul", step))
        x, ref = _fresh_x(m, dtype, g, w, bias)
        out.fill_(float("nan"))
        assert cutlass_nm.matmul(x, w, bias, out=out, family="sptc24_sm80").data_ptr() == out.data_ptr()
        _check(out, ref, dtype, ("matmul out=", step))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("m", [13, 96])
def test_sm80_repeat_on_other_streams_and_in_graphs(m, dtype):
    """A repeat whose scratch belongs to its first call's stream: calls on two other streams at once (each with
    its own scratch, 2-D and 3-D x) give their own x's result; graphs captured on a side stream and on the repeat's
    own stream replay on new x contents from their own memory, unchanged by eager calls in between."""
    _sm80_launcher(m, dtype, True)  # skips without an sm_80+ GPU
    _, w, bias, _ = _case(m, *SM80_NK, dtype, seed=700 + m, with_bias=True)
    g = torch.Generator(device="cuda").manual_seed(800 + m)
    for step in range(2):  # the first call plans on the default stream, the second repeats
        x, ref = _fresh_x(m, dtype, g, w, bias)
        _check(cutlass_nm.matmul(x, w, bias, family="sptc24_sm80"), ref, dtype, ("default stream", step))
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    cases = [_fresh_x(m, dtype, g, w, bias) for _ in streams]
    torch.cuda.synchronize()
    results = []
    for _ in range(3):
        for stream, (x, ref) in zip(streams, cases, strict=True):
            with torch.cuda.stream(stream):
                results.append((cutlass_nm.matmul(x, w, bias, family="sptc24_sm80"), ref))
                results.append((cutlass_nm.matmul(x.view(1, m, -1), w, bias, family="sptc24_sm80"), ref))
    for i, (y, ref) in enumerate(results):
        _check(y, ref, dtype, ("side streams", i))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # a signature first called on `side`: its repeat's home stream is `side`
        for step in range(2):
            x, ref = _fresh_x(m, dtype, g, w, None)
            _check(cutlass_nm.matmul(x, w, family="sptc24_sm80"), ref, dtype, ("side home", step))
    for capture_on, use_bias in ((None, bias), (side, None)):
        static_x = torch.empty(m, w.in_features, device="cuda", dtype=dtype)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=capture_on):
            static_y = cutlass_nm.matmul(static_x, w, use_bias, family="sptc24_sm80")
        for step in range(2):
            x, ref = _fresh_x(m, dtype, g, w, use_bias)
            other, other_ref = _fresh_x(m, dtype, g, w, use_bias)
            static_x.copy_(x)
            eager = cutlass_nm.matmul(other, w, use_bias, family="sptc24_sm80")
            static_y.fill_(float("nan"))
            graph.replay()
            _check(static_y, ref, dtype, ("graph", capture_on is not None, step))
            _check(eager, other_ref, dtype, ("eager after capture", capture_on is not None, step))

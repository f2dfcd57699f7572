"""FP8 (e4m3) 2:4 matmul: its input rules on the CPU; against an fp32 reference of the dequantized operands on the
GPU (random inputs, poisoned outputs, tails, m = 1, per-token and per-tensor scales, bias)."""

import pytest
import torch
from gpu_cases import repeats_on_two_streams_and_a_graph

import cutlass_nm
from cutlass_nm import InputError, PatternError, ShapeError
from cutlass_nm.formats.fp8 import E4M3, quantize_rows

gpu = pytest.mark.gpu


def _fp8(n: int, k: int, device: str = "cpu", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g).to(device=device, dtype=torch.bfloat16)
    return cutlass_nm.prune(w, "2:4", dtype=E4M3)[0]


def test_prune_to_fp8_refusals():
    w = torch.randn(16, 64, dtype=torch.float16)
    with pytest.raises(InputError, match="float8_e4m3fn"):
        cutlass_nm.prune(w, "2:4", dtype=torch.int8)
    with pytest.raises(PatternError, match="power of two"):
        cutlass_nm.prune(w, "3:8", dtype=E4M3)


def test_fp32_weights_prune_to_fp8():
    """An FP8 weight may come from an fp32 one (only its pattern is checked): the fp32 magnitudes pick the kept
    pair, and each kept value is within e4m3's step (2^-4 of its row's largest) of the fp32 one."""
    from cutlass_nm.formats.sparse24 import prune_24

    w = torch.randn(64, 128, generator=torch.Generator().manual_seed(3))
    w8, mask = cutlass_nm.prune(w, "2:4", dtype=E4M3)
    assert w8.values.dtype == E4M3 and torch.equal(mask, prune_24(w) != 0)
    kept = w * mask
    assert ((w8.to_dense().float() - kept).abs() <= kept.abs().amax(1, keepdim=True) / 16).all()
    with pytest.raises(InputError, match="float64"):
        cutlass_nm.prune(w.double(), "2:4", dtype=E4M3)


def test_cpu_inputs_are_refused_with_the_rule():
    w8 = _fp8(64, 128)
    with pytest.raises(InputError, match="CUDA device"):
        cutlass_nm.matmul(torch.randn(4, 128, dtype=torch.bfloat16), w8)
    with pytest.raises(InputError, match="float8_e4m3fn"):
        cutlass_nm.matmul(torch.randn(4, 128), w8)  # fp32 x
    with pytest.raises(InputError, match="in_features"):
        cutlass_nm.matmul(torch.randn(4, 64, dtype=torch.bfloat16), w8)
    with pytest.raises(InputError, match="x_scale goes with an FP8 weight"):
        w16, _ = cutlass_nm.prune(torch.randn(64, 128, dtype=torch.float16))
        cutlass_nm.matmul(torch.randn(4, 128, dtype=torch.float16), w16, x_scale=torch.ones(4))
    with pytest.raises(InputError, match="out_dtype"):
        cutlass_nm.matmul(torch.randn(4, 128, dtype=torch.bfloat16), w8, out_dtype=torch.float32)


def _reference(xq: torch.Tensor, sx: torch.Tensor, w8, bias):
    x = xq.float() * sx.reshape(-1, 1)
    ref = x.double() @ w8.to_dense().double().T
    return ref + bias.double() if bias is not None else ref


def _rel(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


@gpu
@pytest.mark.parametrize(("m", "n", "k"), [(1, 256, 512), (7, 264, 352), (129, 1000, 1056), (512, 4096, 4096)])
@pytest.mark.parametrize("per_token", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gpu_fp8_x_with_scales_matches_fp32(m, n, k, per_token, with_bias):
    w8 = _fp8(n, k, "cuda", seed=m + n)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    if per_token:
        xq, sx = quantize_rows(x)
    else:
        sx = (x.abs().amax().float() / 448).reshape(1)
        xq = (x.float() / sx).to(E4M3)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) if with_bias else None
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    y = cutlass_nm.matmul(xq, w8, bias, x_scale=sx, out=out)
    torch.cuda.synchronize()
    assert y.data_ptr() == out.data_ptr() and torch.isfinite(y).all()
    assert _rel(y, _reference(xq, sx, w8, bias)) < 1e-2


@gpu
@pytest.mark.parametrize("x_dtype", [torch.float16, torch.bfloat16, E4M3])
@pytest.mark.parametrize(("n", "k"), [(37, 32), (1000, 4000), (4096, 4096)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gpu_one_token_runs_the_fp8_decode_path(x_dtype, n, k, with_bias):
    """At m = 1 an FP8 weight takes decode24_fp8: a 16-bit x as it is (no quantization), an e4m3 x with its scale;
    any n (tails of every CTA), k a multiple of 32, with bias, into a NaN-poisoned output."""
    from cutlass_nm.dispatch import resolved

    w8 = _fp8(n, k, "cuda", seed=n + k)
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    out_dtype = torch.float16 if x_dtype == torch.float16 else torch.bfloat16
    bias = torch.randn(n, device="cuda", dtype=out_dtype) if with_bias else None
    out = torch.full((1, n), float("nan"), device="cuda", dtype=out_dtype)
    if x_dtype == E4M3:
        xq, sx = quantize_rows(x)
        y = cutlass_nm.matmul(xq, w8, bias, x_scale=sx, out=out)
        ref = _reference(xq, sx, w8, bias)
    else:
        x = x.to(x_dtype)
        y = cutlass_nm.matmul(x, w8, bias, out=out)
        ref = x.double() @ w8.to_dense().double().T + (bias.double() if with_bias else 0)
    torch.cuda.synchronize()
    assert y.data_ptr() == out.data_ptr() and torch.isfinite(y).all()
    assert _rel(y, ref) < 1e-2
    assert {r["family"] for r in resolved() if (r["m"], r["n"], r["k"], r["pattern"]) == (1, n, k, "2:4")} == \
        {"decode24_fp8"}


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_16bit_x_is_quantized_per_token(dtype):
    w8 = _fp8(544, 1088, "cuda", seed=5)
    x = torch.randn(3, 5, 1088, device="cuda", dtype=dtype)
    y = cutlass_nm.matmul(x, w8)
    assert y.shape == (3, 5, 544) and y.dtype == dtype
    xq, sx = quantize_rows(x.reshape(15, 1088))
    assert _rel(y.reshape(15, 544), _reference(xq, sx, w8, None)) < 1e-2
    # against the unquantized x: FP8 activations cost about e4m3's precision
    assert _rel(y.reshape(15, 544), x.reshape(15, 1088).double() @ w8.to_dense().double().T) < 5e-2


@gpu
def test_gpu_fp8_rules():
    w8 = _fp8(256, 512, "cuda")
    xq = torch.randn(4, 512, device="cuda").to(E4M3)
    with pytest.raises(InputError, match="x_scale"):
        cutlass_nm.matmul(xq, w8)
    with pytest.raises(InputError, match="x_scale"):
        cutlass_nm.matmul(xq, w8, x_scale=torch.ones(3, device="cuda"))
    with pytest.raises(InputError, match="bias"):
        cutlass_nm.matmul(xq, w8, torch.zeros(256, device="cuda"), x_scale=torch.ones(1, device="cuda"))
    odd = _fp8(256, 528, "cuda")  # k % 32 != 0
    with pytest.raises(ShapeError, match="multiple of 32"):
        cutlass_nm.matmul(torch.randn(4, 528, device="cuda", dtype=torch.bfloat16), odd)


def test_fp8_sparse_linear_on_the_cpu_reference_path():
    from torch import nn

    lin = nn.Linear(128, 64).to(torch.bfloat16)
    sl = cutlass_nm.SparseLinear.from_linear(lin, "2:4", fp8=True)
    assert sl.values.dtype == torch.uint8 and sl.scale.dtype == torch.float32 and "fp8=True" in repr(sl)
    x = torch.randn(3, 5, 128, dtype=torch.bfloat16)
    y = sl(x)
    xq, sx = quantize_rows(x.reshape(15, 128).float())
    want = _reference(xq, sx, sl.compressed(), sl.bias.detach()).reshape(3, 5, 64)
    assert y.dtype == torch.bfloat16 and _rel(y, want) < 1e-2
    again = cutlass_nm.SparseLinear(128, 64, True, "2:4", dtype=torch.bfloat16, fp8=True)
    again.load_state_dict(sl.state_dict())
    assert torch.equal(again(x), y)
    model = cutlass_nm.sparsify(nn.Sequential(nn.Linear(128, 64), nn.Linear(64, 48)).to(torch.bfloat16), "2:4",
                                fp8=True)
    assert all(m.fp8 for m in model) and not model.sparsify_summary.skipped
    with pytest.raises(PatternError, match="2:4"):
        cutlass_nm.SparseLinear(128, 64, pattern="2:8", fp8=True)
    with pytest.raises(PatternError, match="in_features"):
        cutlass_nm.SparseLinear(112, 64, fp8=True)


@gpu
def test_gpu_fp8_sparse_linear_direct_compiled_and_graph_agree():
    from torch import nn

    sl = cutlass_nm.SparseLinear.from_linear(nn.Linear(512, 256).to("cuda", torch.bfloat16), "2:4", fp8=True)
    x = torch.randn(16, 512, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        direct = sl(x)
        compiled = torch.compile(sl, fullgraph=True)(x)
        static_x = x.clone()
        sl(static_x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = sl(static_x)
        graph.replay()
    xq, sx = quantize_rows(x)
    assert _rel(direct, _reference(xq, sx, sl.compressed(), sl.bias.detach())) < 1e-2
    torch.testing.assert_close(compiled, direct, rtol=0, atol=0)
    torch.testing.assert_close(static_y, direct, rtol=0, atol=0)


def test_fp8_dispatch_plumbing_with_a_stand_in_kernel(monkeypatch):
    """_matmul_fp8 up to the launch, on the CPU: the kernel it resolves gets e4m3 x (quantized per token from a
    16-bit x by the family's quantizer), the per-token scales, a (m, n) view of y and the bias; stand-ins compute
    what the kernels do."""
    from cutlass_nm import dispatch

    seen = {}

    def kernel(xq, w, bias, y, sx):
        seen.update(x=xq, sx=sx, y=y)
        ref = (xq.float() * sx.reshape(-1, 1)) @ w.to_dense().T
        y.copy_(ref + (bias.float() if bias is not None else 0))

    kernel.quantize = lambda x: quantize_rows(x, check=False)  # what the family's one-launch kernel computes
    monkeypatch.setattr(dispatch, "check_fp8_inputs", lambda *a: None)
    monkeypatch.setattr(dispatch, "_resolve", lambda key: seen.setdefault("key", key) and kernel)
    monkeypatch.setattr(dispatch, "_RESOLVED", {})
    w8 = _fp8(64, 128)
    x = torch.randn(2, 3, 128, dtype=torch.bfloat16)
    bias = torch.randn(64, dtype=torch.bfloat16)
    y = cutlass_nm.matmul(x, w8, bias)
    assert y.shape == (2, 3, 64) and y.dtype == torch.bfloat16
    assert seen["x"].dtype == E4M3 and seen["x"].shape == (6, 128) and seen["sx"].shape == (6,)
    assert seen["y"].shape == (6, 64) and seen["key"][3] == E4M3 and seen["key"][4] == torch.bfloat16
    xq, sx = quantize_rows(x.reshape(6, 128).float())
    assert _rel(y.reshape(6, 64), _reference(xq, sx, w8, bias)) < 1e-2
    xq8 = x.reshape(6, 128).float().to(E4M3)
    y8 = cutlass_nm.matmul(xq8, w8, x_scale=torch.ones(1))  # e4m3 x: its scale passes through, bf16 out
    assert y8.dtype == torch.bfloat16 and seen["x"].data_ptr() == xq8.data_ptr() and seen["sx"].shape == (1,)


def test_fp8_launcher_passes_arguments_in_the_c_order(monkeypatch):
    """The FP8 launcher's ctypes call: D = W·xᵀ, so M = n (weight rows), N = m (tokens); W's scale is a vector,
    x's a vector unless it holds one value."""
    from cutlass_nm.families.sptc24_fp8_sm90 import family as fp8_family

    calls = []

    class Fn:
        argtypes = restype = None

        def __init__(self, value):
            self.value = value

        def __call__(self, *args):
            calls.append(args)
            return self.value

    class Lib:
        cnm_run = Fn(0)
        cnm_meta_atom_k = Fn(128)
        cnm_quantize_rows = Fn(0)
        cnm_plan_bytes = Fn(64)
        cnm_plan = Fn(0)
        cnm_launch = Fn(0)

    monkeypatch.setattr(fp8_family, "gil_holding", lambda lib, name, *types: getattr(lib, name))
    cfg = fp8_family.Config(swizzle=4, raster="n")
    launcher = fp8_family._Launcher(Lib(), cfg)
    w8 = _fp8(64, 128)
    x = torch.zeros(5, 128, dtype=E4M3)
    y = torch.empty(5, 64, dtype=torch.bfloat16)
    monkeypatch.setattr(fp8_family, "device_info", lambda device: type("Info", (), {"sm_count": 132})())
    monkeypatch.setattr(fp8_family, "stream_of", lambda t: 7)
    for sx, vector in ((torch.ones(5), 1), (torch.ones(1), 0)):
        launcher(x, w8, None, y, sx)
        a = calls[-1]
        assert a[0] == w8.values.data_ptr() and a[2] == x.data_ptr() and a[3] == y.data_ptr()
        assert a[4] == w8.scale.data_ptr() and a[5] == 1 and a[6] == sx.data_ptr() and a[7] == vector
        assert a[8] is None and a[9:13] == (64, 5, 128, 132) and a[13:15] == (4, 2) and a[16] == 7
    x16 = torch.zeros(5, 128, dtype=torch.bfloat16)
    q, scale = launcher.quantize(x16)
    a = calls[-1]
    assert q.dtype == E4M3 and q.shape == (5, 128) and scale.shape == (5,) and scale.dtype == torch.float32
    assert a == (x16.data_ptr(), q.data_ptr(), scale.data_ptr(), 5, 128, 1, 7)



def test_fp8_repeat_quantizes_and_launches_from_one_plan(monkeypatch):
    """A 16-bit x's repeat: one plan per (weight, bias, m, stream), built on the stream's scratch (e4m3 x, then the
    per-token scales 16-byte aligned after it), launched with each call's x and y; another stream's call quantizes
    and runs per call."""
    import types

    from launch_helpers import Recorder, entries_by_name

    from cutlass_nm.families.launch import DeviceInfo
    from cutlass_nm.families.sptc24_fp8_sm90 import family as fp8_family

    entries_by_name(monkeypatch, fp8_family)
    monkeypatch.setattr(fp8_family, "device_info", lambda dev: DeviceInfo(132, (9, 0), "fake"))
    stream = {"now": 5}
    monkeypatch.setattr(fp8_family, "stream_of", lambda x: stream["now"])
    monkeypatch.setattr("cutlass_nm.families.launch._raw_stream", lambda index: stream["now"])
    lib = types.SimpleNamespace(cnm_run=Recorder(0), cnm_meta_atom_k=lambda: 128, cnm_quantize_rows=Recorder(0),
                                cnm_plan_bytes=lambda: 64, cnm_plan=Recorder(0), cnm_launch=Recorder(0))
    launcher = fp8_family._Launcher(lib, fp8_family.Config())
    w8 = _fp8(64, 128)
    x, y = torch.randn(5, 128, dtype=torch.bfloat16), torch.empty(5, 64, dtype=torch.bfloat16)
    go = launcher.steady(x, w8, None, y)
    assert launcher.steady(x, w8, None, y).keep[-1] is go.keep[-1] and len(lib.cnm_plan.calls) == 1
    plan, _, _, q, d, sw, sw_vector, scale, bias, *problem, x_bf16 = lib.cnm_plan.calls[0]
    scratch = go.keep[-1]
    assert q == scratch.data_ptr() and scale == q + 640 and scratch.numel() >= 640 + 4 * 5
    assert (d, sw, sw_vector, bias, problem, x_bf16) == (y.data_ptr(), w8.scale.data_ptr(), 1, None,
                                                          [64, 5, 128, 132, 1, 0], 1)
    x2, y2 = torch.randn(5, 128, dtype=torch.bfloat16), torch.empty(5, 64, dtype=torch.bfloat16)
    go(x2, w8, None, y2)
    assert lib.cnm_launch.calls == [(plan, x2.data_ptr(), y2.data_ptr(), 5)] and not lib.cnm_run.calls
    stream["now"] = 9  # another stream: quantized into fresh tensors, then the per-call GEMM
    go(x2, w8, None, y2)
    assert len(lib.cnm_launch.calls) == 1 and lib.cnm_quantize_rows.calls[-1][0] == x2.data_ptr()
    assert lib.cnm_run.calls[-1][3] == y2.data_ptr() and lib.cnm_run.calls[-1][16] == 9

@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_one_launch_quantizer_matches_the_torch_one(dtype):
    from cutlass_nm.families import KernelTypes, Problem, get_family
    from cutlass_nm.kernels import get_kernel

    fam, types = get_family("sptc24_fp8_sm90"), KernelTypes("e4m3", "bf16", False)
    launcher = get_kernel(("sptc24_fp8_sm90", fam.heuristic(Problem(16, 256, 512, types)), types))
    g = torch.Generator(device="cuda").manual_seed(11)
    x = torch.randn(37, 1000, device="cuda", dtype=dtype, generator=g) * \
        torch.logspace(-2, 2, 37, device="cuda")[:, None].to(dtype)
    x[3] = 0  # an all-zero row keeps a finite scale
    q, s = launcher.quantize(x)
    want_q, want_s = quantize_rows(x)
    torch.testing.assert_close(s, want_s, rtol=1e-6, atol=0)
    got, want = q.float(), want_q.float()
    # the same rounding but for ties (x / s vs x * (1 / s)): rare, more so for fp16 than for bf16's coarser grid
    # (one H200 run: 0.2 % of bf16 elements); the two checks below bound every element
    assert (got == want).float().mean() > 0.99
    assert ((got - want).abs() <= want.abs() / 8 + 2 ** -9).all()  # a tie goes at most one e4m3 step the other way
    assert _rel(got * s[:, None], x.float()) <= 1.01 * _rel(want * want_s[:, None], x.float())  # no less accurate


def test_decode_packed_meta_read_as_the_kernel_reads_it():
    """decode24_fp8's metadata layout, read the way its kernel reads it: chunk c of a row is 16 e4m3 values
    (bytes 16c..16c+15) and one 32-bit word of packed metadata whose nibble g holds group 8c + g's two positions
    (bits 0-1, 2-3); value pair g sits at bytes 2g, 2g+1. Summing x at those positions times the values gives x·Wᵀ."""
    from cutlass_nm.families.decode24_fp8.family import packed_meta

    n, k = 5, 96
    w8 = _fp8(n, k, seed=3)
    meta = packed_meta(w8)
    assert meta.shape == (n, k // 8) and meta.dtype == torch.uint8 and meta.is_contiguous()
    x = torch.randn(k, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    values = w8.values.to(torch.float64)  # e4m3 -> exact in fp64
    words = meta.to(torch.int64)
    y = torch.zeros(n, dtype=torch.float64)
    for r in range(n):
        for c in range(k // 32):
            word = sum(int(words[r, 4 * c + b]) << (8 * b) for b in range(4))  # little-endian, as a u32 load
            for g in range(8):
                nib = (word >> (4 * g)) & 0xF
                p0, p1 = nib & 3, nib >> 2
                col = 32 * c + 4 * g
                y[r] += x[col + p0] * values[r, 16 * c + 2 * g] + x[col + p1] * values[r, 16 * c + 2 * g + 1]
    dense = w8.to_dense().double()  # scaled in fp32: each weight within 2^-24 of exact
    assert ((y * w8.scale.double() - dense @ x).abs() <= 1e-6 * (dense.abs() @ x.abs())).all()


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("m", "with_bias"), [(1, False), (7, True), (129, False)])
def test_gpu_16bit_x_repeats_follow_new_inputs_streams_and_graphs(dtype, m, with_bias):
    """A 16-bit x's repeated GEMM calls (one plan: quantize and GEMM in one call) give each new x its own result
    (3-D x as well), on two side streams at once, and a graph captured after them replays its own x; m = 1 repeats
    the decode path."""
    n, k = 264, 1056
    w8 = _fp8(n, k, "cuda", seed=m)
    bias = torch.randn(n, device="cuda", dtype=dtype) if with_bias else None
    ref_w = w8.to_dense().double()

    def check(y: torch.Tensor, x: torch.Tensor) -> None:
        x2 = x.reshape(-1, k)
        assert torch.isfinite(y).all() and y.dtype == dtype
        ref = x2.double() @ ref_w.T + (bias.double() if with_bias else 0)
        if m == 1:  # the decode path takes x as it is
            assert _rel(y.reshape(-1, n), ref) < 1e-2
            return
        xq, sx = quantize_rows(x2)
        assert _rel(y.reshape(-1, n), _reference(xq, sx, w8, bias)) < 1e-2
        assert _rel(y.reshape(-1, n), ref) < 5e-2

    xs = [torch.randn(m, k, device="cuda", dtype=dtype) for _ in range(4)]
    for x in xs:
        check(cutlass_nm.matmul(x, w8, bias), x)
    x3 = torch.randn(1, m, k, device="cuda", dtype=dtype)
    for _ in range(2):
        check(cutlass_nm.matmul(x3, w8, bias), x3)
    repeats_on_two_streams_and_a_graph(lambda x: cutlass_nm.matmul(x, w8, bias), xs, check)

"""FP8 V:N:M on Sparse Tensor Cores (vnm_fp8_sm90, forced) on the GPU against an fp64 reference of the dequantized
operands: random inputs, NaN-poisoned outputs, tails in m, n and k, V = 64 and 128, several M, per-token and
per-tensor x scales, bias, and the config space's knobs (tiles, clusters, mainloops, CTA orders)."""

from __future__ import annotations

import pytest
import torch
from gpu_cases import repeats_on_two_streams_and_a_graph

import cutlass_nm
from cutlass_nm.formats.fp8 import E4M3, quantize_rows

pytestmark = pytest.mark.gpu

# (m, n, k): m = 1 (forced: the GEMM, not the decode path), tails in m, n and k (k not a multiple of M either), one
# that takes 256-token tiles
SHAPES = [(1, 256, 512), (2, 256, 512), (17, 200, 1000), (300, 640, 2056), (4096, 2048, 1024)]
PATTERNS = ["128:2:8", "64:2:8", "128:2:16", "128:2:5"]
CONFIGS = [
    {"tile_m": 128, "tile_n": 64, "stages": 5, "consumers": 2},
    {"tile_m": 128, "tile_n": 128, "stages": 3, "consumers": 2, "raster": 0},
    {"tile_m": 128, "tile_n": 256, "stages": 4, "consumers": 2, "cluster": 2},
    {"tile_m": 128, "tile_n": 256, "stages": 4, "consumers": 2, "mma_pipe": 1},
    {"tile_m": 64, "tile_n": 256, "stages": 4, "consumers": 1},
    {"tile_m": 128, "tile_n": 128, "stages": 4, "consumers": 1, "cluster": 2, "raster": 0},
]


def _weight(pattern: str, n: int, k: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) / k ** 0.5).to(device="cuda", dtype=torch.bfloat16)
    return cutlass_nm.prune(w, pattern, dtype=E4M3)[0]


def _rel(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


@pytest.fixture(autouse=True)
def _default_selector():
    yield
    cutlass_nm.dispatch.set_selector(None)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
@pytest.mark.parametrize("x_kind", ["bf16", "e4m3"])
def test_gpu_fp8_vnm_forced(pattern, m, n, k, x_kind):
    """matmul(..., family="vnm_fp8_sm90") above one token, with the heuristic config: a bf16 x quantized per token
    inside, or an e4m3 x with its per-token scale; bias, bf16 output into a NaN-poisoned buffer."""
    from cutlass_nm.dispatch import resolved

    w8 = _weight(pattern, n, k, seed=m + n + k)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    xq, sx = quantize_rows(x, check=False)
    if x_kind == "bf16":
        y = cutlass_nm.matmul(x, w8, bias, out=out, family="vnm_fp8_sm90")
    else:
        y = cutlass_nm.matmul(xq, w8, bias, x_scale=sx, out=out, family="vnm_fp8_sm90")
    torch.cuda.synchronize()
    ref = (xq.double() * sx.double()[:, None]) @ w8.to_dense().double().T + bias.double()
    assert y.data_ptr() == out.data_ptr() and torch.isfinite(y).all()
    assert _rel(y, ref) < 1e-2
    assert {r["family"] for r in resolved() if (r["m"], r["n"], r["k"], r["pattern"]) == (m, n, k, pattern)} == \
        {"vnm_fp8_sm90"}


@pytest.mark.parametrize("record", CONFIGS, ids=lambda r: "-".join(f"{k}{v}" for k, v in r.items()))
@pytest.mark.parametrize(("m", "n", "k"), [(300, 640, 2056), (1000, 1024, 4096)])
def test_gpu_fp8_vnm_configs(record, m, n, k):
    """Every knob of the space, forced: a per-tensor x scale, fp16 output with a bias, tails in m and n."""
    from cutlass_nm.families import FAMILIES

    family = FAMILIES["vnm_fp8_sm90"]
    cfg = family.Config.from_record(record)
    cutlass_nm.dispatch.set_selector(lambda fam, problem: cfg if fam is family else None)
    pattern = "64:2:8" if cfg.tile_m == 64 else "128:2:8"
    w8 = _weight(pattern, n, k, seed=n)
    xq = (torch.randn(m, k, device="cuda") * 30).clamp(-448, 448).to(E4M3)
    sx = torch.full((1,), 0.05, device="cuda")
    bias = torch.randn(n, device="cuda", dtype=torch.float16)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    y = cutlass_nm.matmul(xq, w8, bias, x_scale=sx, out=out, out_dtype=torch.float16, family="vnm_fp8_sm90")
    torch.cuda.synchronize()
    ref = xq.double() * 0.05 @ w8.to_dense().double().T + bias.double()
    assert torch.isfinite(y).all() and _rel(y, ref) < 1e-2
    assert [r["config"] for r in cutlass_nm.dispatch.resolved() if r["family"] == "vnm_fp8_sm90"][-1] == \
        cfg.to_record()


def test_gpu_fp8_vnm_repeated_calls_agree_and_graph_capture_works():
    """The plan path (second call on) gives the first call's bits, also inside a CUDA graph."""
    w8 = _weight("128:2:8", 512, 1024, seed=3)
    xq, sx = quantize_rows(torch.randn(64, 1024, device="cuda"), check=False)
    first = cutlass_nm.matmul(xq, w8, x_scale=sx, family="vnm_fp8_sm90")
    again = cutlass_nm.matmul(xq, w8, x_scale=sx, family="vnm_fp8_sm90")
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        cutlass_nm.matmul(xq, w8, x_scale=sx, family="vnm_fp8_sm90")
        with torch.cuda.graph(graph, stream=stream):
            captured = cutlass_nm.matmul(xq, w8, x_scale=sx, family="vnm_fp8_sm90")
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(first, again) and torch.equal(first, captured)


@pytest.mark.parametrize(("m", "k", "with_bias", "dtype"), [(1, 1000, False, torch.float16),
                                                           (17, 1000, True, torch.bfloat16),
                                                           (300, 1001, False, torch.float16),
                                                           (40, 9000, True, torch.bfloat16),
                                                           (100, 5000, False, torch.float16)])
def test_gpu_fp8_vnm_16bit_x_repeats_follow_new_inputs_streams_and_graphs(m, k, with_bias, dtype):
    """A 16-bit x's repeats (quantization, transpose and GEMM in one call through the stream's scratch) equal the
    first call bit for bit, give each new x its own result, on two side streams at once and in a graph captured
    after them; m = 1, fp16 and bf16, k = 1001 (rows not 16-byte aligned) and k above 4096."""
    n = 512
    w8 = _weight("128:2:8", n, k, seed=m)
    bias = torch.randn(n, device="cuda", dtype=dtype) if with_bias else None

    def check(y: torch.Tensor, x: torch.Tensor) -> None:
        xq, sx = quantize_rows(x)
        ref = (xq.double() * sx.double()[:, None]) @ w8.to_dense().double().T + (bias.double() if with_bias else 0)
        assert torch.isfinite(y).all() and _rel(y, ref) < 1e-2

    xs = [torch.randn(m, k, device="cuda", dtype=dtype) for _ in range(4)]
    first = cutlass_nm.matmul(xs[0], w8, bias, family="vnm_fp8_sm90")
    again = cutlass_nm.matmul(xs[0], w8, bias, family="vnm_fp8_sm90")
    assert torch.equal(first, again)
    for x in xs:
        check(cutlass_nm.matmul(x, w8, bias, family="vnm_fp8_sm90"), x)
    repeats_on_two_streams_and_a_graph(lambda x: cutlass_nm.matmul(x, w8, bias, family="vnm_fp8_sm90"), xs, check)


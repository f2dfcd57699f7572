"""FP8 (e4m3) general N:M and V:N:M weights: the format, the decode layout read as the kernel reads it, routing and
dispatch plumbing on the CPU; on the GPU, one token on nm_decode_fp8 and more tokens on the 16-bit twin against an
fp64 reference of the dequantized operands (random inputs, NaN-poisoned outputs, tails, bias)."""

import logging

import pytest
import torch

import cutlass_nm
from cutlass_nm import InputError, NMFP8Weight, Pattern, PatternError, VNMFP8Weight
from cutlass_nm.families import FAMILIES
from cutlass_nm.families.nm_decode_fp8.family import CHUNK, stream_layout, streamed_bytes
from cutlass_nm.formats.fp8 import E4M3, Sparse24FP8Weight, quantize_rows, read_as
from cutlass_nm.formats.nm import NMWeight
from cutlass_nm.formats.vnm import VNMWeight
from cutlass_nm.routing import default_family, fp8_twin

gpu = pytest.mark.gpu
PATTERNS = ("2:8", "1:4", "4:16", "128:2:8", "64:2:16")


def _weight(pattern: str, n: int, k: int, device: str = "cpu", seed: int = 0, vector: int = 1):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) / k ** 0.5).to(device=device, dtype=torch.bfloat16)
    return cutlass_nm.prune(w, pattern, vector=vector, dtype=E4M3)[0]


def _rel(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("pattern", PATTERNS)
def test_prune_to_fp8_keeps_the_16bit_mask_within_e4m3s_step(pattern):
    w = torch.randn(64, 200, generator=torch.Generator().manual_seed(1)).bfloat16()
    w8, mask = cutlass_nm.prune(w, pattern, vector=1, dtype=E4M3)
    assert type(w8) is (VNMFP8Weight if pattern.count(":") == 2 else NMFP8Weight) and w8.values.dtype == E4M3
    c, mask16 = cutlass_nm.prune(w, pattern, vector=1)
    assert torch.equal(mask, mask16)
    kept = (w * mask).float()
    assert ((w8.to_dense() - kept).abs() <= kept.abs().amax(1, keepdim=True) / 16).all()
    assert w8.dequantized(torch.bfloat16).dtype == torch.bfloat16
    assert type(w8.dequantized(torch.float16)) is type(c)


def test_fp8_patterns_the_decode_path_cannot_read_are_refused():
    w = torch.randn(16, 96)
    with pytest.raises(PatternError, match="power of two"):
        cutlass_nm.prune(w, "3:8", dtype=E4M3)
    with pytest.raises(PatternError, match="M <= 16"):
        cutlass_nm.prune(w, "2:32", dtype=E4M3)
    with pytest.raises(InputError, match="already FP8"):
        cutlass_nm.quantize(_weight("2:8", 16, 64))


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize(("n", "k"), [(37, 100), (64, 256), (130, 1000)])
@pytest.mark.parametrize("vector", [1, 32, 64])
def test_stream_layout_read_as_the_kernel_reads_it(pattern, n, k, vector):
    """nm_decode_fp8's layout, read as its kernel reads it: value i of chunk c of a row is in group
    (16 c + i) / N, column group * M + its nibble (one set of nibbles per 32-row block where those rows share their
    positions: N:M of vector % 32 == 0), x zero past k; the dot products equal x·Wᵀ."""
    if Pattern.parse(pattern).is_vnm and vector != 1:
        pytest.skip("vector is an N:M weight's (V:N:M positions are per row)")
    w8 = _weight(pattern, n, k, seed=n + k, vector=vector)
    values, pos, kv = stream_layout(w8)
    keep, group = read_as(w8.pattern)
    blocks = values.shape[0]
    shared = vector % 32 == 0 and isinstance(w8, NMFP8Weight)
    assert values.shape == (blocks, kv // CHUNK, 32, CHUNK)
    assert pos.shape == (blocks, kv // CHUNK, CHUNK // 2) if shared else (blocks, kv // CHUNK, 32, CHUNK // 2)
    assert streamed_bytes(w8) == values.numel() + pos.numel() + 4 * n
    if shared:
        pos = pos[:, :, None, :].expand(blocks, kv // CHUNK, 32, CHUNK // 2)
    vals = values.view(E4M3).float().permute(0, 2, 1, 3).reshape(blocks * 32, kv)
    nib = torch.stack((pos & 0xF, pos >> 4), -1).permute(0, 2, 1, 3, 4).reshape(blocks * 32, kv).long()
    j = torch.arange(kv)
    cols = (j // keep) * group + nib
    x = torch.randn(k)
    xs = torch.zeros(kv // keep * group)
    xs[:k] = x
    y = (xs[cols] * vals).sum(1)[:n].double() * w8.scale.double()
    assert _rel(y, x.double() @ w8.to_dense().double().T) < 1e-6


def test_routing_and_which_families_take_fp8_weights():
    for kind in (NMFP8Weight, VNMFP8Weight):
        assert default_family(None, kind, 1, pattern="2:8") == "nm_decode_fp8"
        assert fp8_twin(kind, 1, None) is None
    # above one token: N:M and V:N:M run their 16-bit twins unless the FP8 V:N:M GEMM is forced; 2:4 its FP8 GEMM
    assert fp8_twin(NMFP8Weight, 2, None) is NMWeight and fp8_twin(VNMFP8Weight, 16, None) is VNMWeight
    assert fp8_twin(VNMFP8Weight, 16, "vnm_fp8_sm90") is None and fp8_twin(Sparse24FP8Weight, 16, None) is None
    assert fp8_twin(NMFP8Weight, 16, "nm_simt") is NMWeight  # a 16-bit family never runs it: matmul refuses
    with pytest.raises(cutlass_nm.ShapeError, match="16-bit twin"):
        default_family(None, VNMFP8Weight, 2, pattern="128:2:8")
    assert FAMILIES["vnm_fp8_sm90"].runs(VNMFP8Weight) and not FAMILIES["vnm_fp8_sm90"].runs(VNMWeight)
    # a 16-bit family never reads e4m3 values as its own, and the FP8 families take only FP8 weights
    for name in ("nm_decode", "nm_decode_simt", "nm_simt", "vnm_sm90", "decode24", "sptc24_sm90"):
        assert not any(FAMILIES[name].runs(kind) for kind in (NMFP8Weight, VNMFP8Weight, Sparse24FP8Weight))
    assert FAMILIES["nm_decode_fp8"].runs(VNMFP8Weight) and not FAMILIES["nm_decode_fp8"].runs(NMWeight)
    assert FAMILIES["decode24_fp8"].runs(Sparse24FP8Weight)


def test_fp8_nm_weights_are_refused_by_the_checkpoint_writer(tmp_path):
    from cutlass_nm import CheckpointError

    for pattern in ("2:8", "128:2:8"):
        with pytest.raises(CheckpointError, match="16-bit weight"):
            cutlass_nm.save_sparse({"layer": _weight(pattern, 128, 256)}, tmp_path / "w.safetensors")
    assert not (tmp_path / "w.safetensors").exists()


def test_fp8_nm_problem_records_validate():
    from cutlass_nm.store.validate import RecordError, validate_problem

    rec = {"family": "nm_decode_fp8", "pattern": "2:8", "m_bucket": 1, "n": 4096, "k": 4096, "dtype": "e4m3",
           "out_dtype": "bf16", "layout": "tn", "bias": False, "alignment": 16}
    for pattern in ("2:8", "4:16", "128:2:8"):
        assert validate_problem({**rec, "pattern": pattern}).family == "nm_decode_fp8"
    with pytest.raises(RecordError, match="does not run"):
        validate_problem({**rec, "pattern": "2:4"})


def test_fp8_nm_dispatch_plumbing_with_a_stand_in_kernel(monkeypatch, caplog):
    """On the CPU, up to the launch: one token resolves nm_decode_fp8 with x as it comes; more tokens run the
    weight's 16-bit twin in the output dtype (an e4m3 x dequantized with its scale), built once, with one warning;
    a forced FP8 V:N:M GEMM takes x quantized per token."""
    from cutlass_nm import dispatch

    seen = []

    def kernel(x, w, bias, y, sx=None):
        seen.append((x, w, sx))
        scale = 1.0 if sx is None else sx.reshape(-1, 1)
        y.copy_((x.float() * scale) @ w.to_dense().float().T)

    kernel.quantize = lambda x: quantize_rows(x, check=False)
    monkeypatch.setattr(dispatch, "check_fp8_inputs", lambda *a: None)
    monkeypatch.setattr(dispatch, "check_inputs", lambda *a, **k: None)
    monkeypatch.setattr(dispatch, "_resolve", lambda key: seen.append(key) or kernel)
    monkeypatch.setattr(dispatch, "_RESOLVED", {})
    monkeypatch.setattr(dispatch, "_TWIN_WARNED", set())
    for pattern in ("2:8", "128:2:8"):
        w8 = _weight(pattern, 64, 256)
        x = torch.randn(1, 256, dtype=torch.bfloat16)
        y = cutlass_nm.matmul(x, w8)
        key, (x_seen, w_seen, sx) = seen[-2], seen[-1]
        assert key[3] == torch.bfloat16 and key[8] is type(w8) and sx is None
        assert x_seen.data_ptr() == x.data_ptr() and w_seen is w8
        assert _rel(y, x.double() @ w8.to_dense().double().T) < 1e-2
    for pattern, twin in (("2:8", NMWeight), ("128:2:8", VNMWeight)):
        w8 = _weight(pattern, 64, 256)
        xq, sx = quantize_rows(torch.randn(5, 256))
        caplog.clear()
        monkeypatch.setattr(dispatch, "_TWIN_WARNED", set())
        with caplog.at_level(logging.WARNING, logger="cutlass_nm.dispatch"):
            y = cutlass_nm.matmul(xq, w8, x_scale=sx)
            cutlass_nm.matmul(xq, w8, x_scale=sx)
        key, (x_seen, w_seen, _) = seen[-2], seen[-1]
        assert key[8] is twin and key[3] == torch.bfloat16 and x_seen.dtype == torch.bfloat16
        assert type(w_seen) is twin and w_seen is w8.layout(("twin", torch.bfloat16), None)
        assert len([r for r in caplog.records if "copy" in r.getMessage()]) == 1
        assert _rel(y, (xq.float() * sx[:, None]).double() @ w8.to_dense().double().T) < 1e-2
        with pytest.raises(InputError, match="does not run it"):
            cutlass_nm.matmul(xq, w8, x_scale=sx, family="nm_simt")
    w8 = _weight("128:2:8", 64, 256)
    x = torch.randn(5, 256, dtype=torch.bfloat16)
    y = cutlass_nm.matmul(x, w8, family="vnm_fp8_sm90")
    key, (x_seen, w_seen, sx) = seen[-2], seen[-1]
    assert key[8] is VNMFP8Weight and key[3] == E4M3 and x_seen.dtype == E4M3 and w_seen is w8
    ref = (x_seen.double() * sx.double()[:, None]) @ w8.to_dense().double().T  # x as it was quantized
    assert sx.shape == (5,) and _rel(y, ref) < 1e-2 and _rel(x_seen.double() * sx.double()[:, None], x.double()) < 0.1


def test_a_16bit_x_decode_call_takes_the_steady_state_path_next(monkeypatch):
    """One token with a 16-bit x: the first call resolves and checks, later calls of that signature go straight to
    the kernel (matmul's steady-state path); an e4m3 x with its scale, or another shape, takes the full path."""
    from cutlass_nm import dispatch

    calls = {"checks": 0, "kernel": 0}

    def kernel(x, w, bias, y, sx=None):
        calls["kernel"] += 1
        y.copy_(x.float() @ w.to_dense().float().T)

    def check(*args):
        calls["checks"] += 1

    monkeypatch.setattr(dispatch, "check_fp8_inputs", check)
    monkeypatch.setattr(dispatch, "_resolve", lambda key: kernel)
    monkeypatch.setattr(dispatch, "_RESOLVED", {})
    w8 = _weight("2:8", 64, 256)
    x = torch.randn(1, 1, 256, dtype=torch.bfloat16)
    first = cutlass_nm.matmul(x, w8)
    again = cutlass_nm.matmul(x, w8)
    assert calls == {"checks": 1, "kernel": 2} and torch.equal(first, again) and again.shape == (1, 1, 64)
    xq, sx = quantize_rows(torch.randn(1, 256))
    cutlass_nm.matmul(xq, w8, x_scale=sx)
    assert calls == {"checks": 2, "kernel": 3}



def test_a_16bit_x_twin_call_takes_the_steady_state_path_next(monkeypatch):
    """Above one token a 16-bit x in the output dtype runs the 16-bit twin; its later calls of that signature go
    straight to the twin's kernel (no FP8 input checks, the twin in the weight's place), 3-D x included; another
    output dtype (x converted first) takes the full path each time."""
    from cutlass_nm import dispatch

    calls = {"checks": 0}
    weights = []

    def kernel(x, w, bias, y, sx=None):
        weights.append(w)
        y.copy_(x.float() @ w.to_dense().float().T)

    def check(*args):
        calls["checks"] += 1

    monkeypatch.setattr(dispatch, "check_fp8_inputs", check)
    monkeypatch.setattr(dispatch, "check_inputs", lambda *a, **k: None)
    monkeypatch.setattr(dispatch, "_resolve", lambda key: kernel)
    monkeypatch.setattr(dispatch, "_RESOLVED", {})
    for pattern in ("2:8", "128:2:8"):
        calls["checks"] = 0
        w8 = _weight(pattern, 64, 256)
        twin = w8.layout(("twin", torch.bfloat16), dispatch._twin_builder(torch.bfloat16))
        x = torch.randn(2, 3, 256, dtype=torch.bfloat16)
        first = cutlass_nm.matmul(x, w8)
        again = cutlass_nm.matmul(x, w8)
        assert calls["checks"] == 1 and torch.equal(first, again) and again.shape == (2, 3, 64)
        assert weights[-2:] == [twin, twin]
        assert _rel(again.reshape(6, 64), x.reshape(6, 256).double() @ w8.to_dense().double().T) < 1e-2
        cutlass_nm.matmul(x, w8, out_dtype=torch.float16)
        cutlass_nm.matmul(x, w8, out_dtype=torch.float16)
        assert calls["checks"] == 3

def test_fp8_nm_launcher_passes_arguments_in_the_c_order(monkeypatch):
    from cutlass_nm.families.nm_decode_fp8 import family as fam

    calls = []

    class Run:
        argtypes = restype = None

        def __call__(self, *args):
            calls.append(args)
            return 0

    class Lib:
        cnm_decode = Run()

    monkeypatch.setattr(fam, "device_info", lambda device: type("Info", (), {"sm_count": 132})())
    monkeypatch.setattr(fam, "stream_of", lambda t: 7)
    w8 = _weight("4:16", 40, 96)
    x, y, sx = torch.zeros(1, 96, dtype=E4M3), torch.empty(1, 40, dtype=torch.bfloat16), torch.ones(1)
    fam._Launcher(Lib())(x, w8, None, y, sx)
    values, pos, kv = w8.layout(fam.LAYOUT_KEY, fam.stream_layout)
    a = calls[-1]
    assert a[:7] == (x.data_ptr(), values.data_ptr(), pos.data_ptr(), w8.scale.data_ptr(), sx.data_ptr(), None,
                     y.data_ptr())
    assert a[7:] == (40, 96, kv, 2, 16, 0, 132, 7) and kv == 32  # vector 1: positions per row


@gpu
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize(("n", "k"), [(37, 100), (1000, 4000), (4096, 4096)])
@pytest.mark.parametrize("x_dtype", [torch.float16, torch.bfloat16, E4M3])
def test_gpu_one_token_runs_nm_decode_fp8(pattern, n, k, x_dtype):
    """m = 1: any n and k (tails of row blocks and chunks), a bias, into a NaN-poisoned output."""
    from cutlass_nm.dispatch import resolved

    w8 = _weight(pattern, n, k, "cuda", seed=n + k, vector=32)
    out_dtype = torch.float16 if x_dtype == torch.float16 else torch.bfloat16
    bias = torch.randn(n, device="cuda", dtype=out_dtype)
    out = torch.full((1, n), float("nan"), device="cuda", dtype=out_dtype)
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    if x_dtype == E4M3:
        xq, sx = quantize_rows(x)
        y = cutlass_nm.matmul(xq, w8, bias, x_scale=sx, out=out)
        xd = xq.double() * sx.double()[:, None]
    else:
        xd = x.to(x_dtype)
        y = cutlass_nm.matmul(xd, w8, bias, out=out)
    torch.cuda.synchronize()
    assert y.data_ptr() == out.data_ptr() and torch.isfinite(y).all()
    assert _rel(y, xd.double() @ w8.to_dense().double().T + bias.double()) < 1e-2
    assert {r["family"] for r in resolved() if (r["m"], r["n"], r["k"], r["pattern"]) == (1, n, k, pattern)} == \
        {"nm_decode_fp8"}


@gpu
@pytest.mark.parametrize("pattern", ["2:8", "128:2:8"])
@pytest.mark.parametrize("m", [2, 16, 300])
def test_gpu_more_tokens_run_the_16bit_twin(pattern, m):
    w8 = _weight(pattern, 512, 1024, "cuda", seed=m)
    x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)
    y = cutlass_nm.matmul(x, w8)
    torch.cuda.synchronize()
    assert y.shape == (m, 512) and torch.isfinite(y).all()
    assert _rel(y, x.double() @ w8.to_dense().double().T) < 1e-2
    x2 = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)  # the repeat: the twin's remembered call
    y2 = cutlass_nm.matmul(x2, w8)
    torch.cuda.synchronize()
    assert torch.isfinite(y2).all() and _rel(y2, x2.double() @ w8.to_dense().double().T) < 1e-2

"""FP8 (e4m3) 2:4 weights on the CPU: per-channel scales, round trip within e4m3's precision, refusals."""

import pytest
import torch

import cutlass_nm
from cutlass_nm import InputError
from cutlass_nm.formats.fp8 import E4M3, E4M3_MAX, dequantize_weight, quantize_rows, quantize_weight


def test_rows_scale_to_the_e4m3_range_and_round_trip():
    t = torch.randn(64, 256) * torch.logspace(-3, 3, 64)[:, None]  # rows six decades apart
    q, scale = quantize_rows(t)
    assert q.dtype == E4M3 and scale.shape == (64,) and scale.dtype == torch.float32
    assert torch.allclose(q.float().abs().amax(1), torch.full((64,), E4M3_MAX))
    back = q.float() * scale[:, None]
    rel = ((back - t).abs() / t.abs().amax(1, keepdim=True)).amax()
    assert rel < 2 ** -4  # e4m3 keeps 3 mantissa bits: half an ulp of the row's largest value at most
    zero_q, zero_scale = quantize_rows(torch.zeros(2, 8))
    assert (zero_scale > 0).all() and (zero_q.float() == 0).all()


def test_weight_quantized_keeps_its_pattern_and_dequantizes_close():
    w, _ = cutlass_nm.prune(torch.randn(96, 128, dtype=torch.bfloat16))
    q = quantize_weight(w)
    assert q.values.dtype == E4M3 and q.scale.shape == (96,) and q.meta is w.meta
    dense, ref = dequantize_weight(q).to_dense(), w.to_dense().float()
    assert ((dense - ref).norm() / ref.norm()).item() < 0.05
    assert ((dense != 0) == (ref != 0)).all()  # the same kept positions
    assert q.to("cpu").scale is not None


def test_refusals():
    w, _ = cutlass_nm.prune(torch.randn(8, 16, dtype=torch.float16))
    with pytest.raises(InputError, match="already FP8"):
        quantize_weight(quantize_weight(w))
    with pytest.raises(InputError, match="not FP8"):
        dequantize_weight(w)
    with pytest.raises(InputError, match="non-finite"):
        quantize_rows(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(InputError, match="2:4"):
        quantize_weight(cutlass_nm.prune(torch.randn(8, 16, dtype=torch.float16), "2:8")[0])

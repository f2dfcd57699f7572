"""FP8 (e4m3) 2:4 weights on the CPU: per-channel scales, round trip within e4m3's precision, refusals."""

import pytest
import torch

import cutlass_nm
from cutlass_nm import InputError, PatternError
from cutlass_nm.formats.fp8 import E4M3, E4M3_MAX, Sparse24FP8Weight, quantize, quantize_rows


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
    q = quantize(w)
    assert isinstance(q, Sparse24FP8Weight) and q.values.dtype == E4M3 and q.scale.shape == (96,)
    assert q.meta is w.meta and str(q.pattern) == "2:4"
    dense, ref = q.to_dense(), w.to_dense().float()
    assert dense.dtype == torch.float32
    assert ((dense - ref).norm() / ref.norm()).item() < 0.05
    assert ((dense != 0) == (ref != 0)).all()  # the same kept positions
    moved = q.to("cpu")
    assert isinstance(moved, Sparse24FP8Weight) and torch.equal(moved.scale, q.scale)


def test_refusals():
    w, _ = cutlass_nm.prune(torch.randn(8, 16, dtype=torch.float16))
    with pytest.raises(InputError, match="already FP8"):
        quantize(quantize(w))
    with pytest.raises(InputError, match="float32 scale"):
        Sparse24FP8Weight(quantize(w).values, w.meta, w.shape, scale=torch.ones(3))
    with pytest.raises(InputError, match="values are"):
        Sparse24FP8Weight(w.values, w.meta, w.shape, scale=torch.ones(8))
    with pytest.raises(InputError, match="non-finite"):
        quantize_rows(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(PatternError, match="power of two"):
        quantize(cutlass_nm.prune(torch.randn(8, 16, dtype=torch.float16), "3:8")[0])


def test_fp8_problem_records_validate_and_foreign_families_do_not():
    from cutlass_nm.store.validate import RecordError, validate_problem

    rec = {"family": "sptc24_fp8_sm90", "pattern": "2:4", "m_bucket": 2048, "n": 4096, "k": 4096, "dtype": "e4m3",
           "out_dtype": "bf16", "layout": "tn", "bias": False, "alignment": 16}
    key = validate_problem(rec)
    assert key.family == "sptc24_fp8_sm90" and key.dtype == "e4m3"
    with pytest.raises(RecordError, match="does not run"):
        validate_problem({**rec, "pattern": "128:2:8"})

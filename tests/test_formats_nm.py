"""General N:M (vector-shared positions) format for the CUDA-core families."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cutlass_nm import Pattern, SparsityError
from cutlass_nm.formats.nm import compress_nm, mask_nm, validate_nm


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["1:4", "2:8", "3:7", "5:16", "16:32", "12:32", "1:8", "7:64"]),
       st.sampled_from([1, 8, 32]), st.integers(1, 70), st.integers(1, 100), st.integers(0, 2**31 - 1))
def test_roundtrip(pattern, vector, rows, k, seed):
    p = Pattern.parse(pattern)
    w = torch.randn(rows, k, generator=torch.Generator().manual_seed(seed))
    c = compress_nm(w, p, vector, prune=True)
    dense = c.to_dense()
    assert torch.equal(dense, w * mask_nm(w, p, vector))
    assert validate_nm(dense, p, vector) is None
    groups = -(-k // p.m)
    assert c.values.shape == (rows, groups * p.n) and c.indices.shape == (-(-rows // vector), groups * p.n)
    idx = c.indices.reshape(c.indices.shape[0], groups, p.n).long()
    assert (idx[..., 1:] > idx[..., :-1]).all() and (idx < p.m).all()
    assert torch.equal(compress_nm(dense, p, vector).to_dense(), dense)


def test_vector_rows_share_positions():
    w = torch.randn(64, 64)
    mask = mask_nm(w, "2:8", vector=32).reshape(2, 32, 8, 8)
    assert (mask == mask[:, :1]).all()
    assert (mask.sum(-1) == 2).all()


def test_element_wise_keeps_row_top_n():
    w = torch.randn(16, 32)
    mask = mask_nm(w, "3:8", vector=1)
    g = w.abs().reshape(16, 4, 8)
    kept_min = g.masked_fill(~mask.reshape(16, 4, 8), float("inf")).min(-1).values
    dropped_max = g.masked_fill(mask.reshape(16, 4, 8), -1.0).max(-1).values
    assert (kept_min >= dropped_max).all()


def test_violation_is_named():
    w = torch.zeros(32, 8)
    w[0, 0] = w[1, 1] = w[2, 2] = 1.0
    assert "3 > 2 positions of group 0" in validate_nm(w, "2:8", 32)
    with pytest.raises(SparsityError):
        compress_nm(w, "2:8", 32)


def test_public_prune_refuses_groups_no_family_runs():
    """M > 64: nm_simt (general N:M at m > 16) takes M <= 64, so prune refuses the pattern, naming the rule."""
    import cutlass_nm
    from cutlass_nm import PatternError

    with pytest.raises(PatternError, match=r"M = 128 > 64: general N:M runs on nm_simt, which takes M <= 64"):
        cutlass_nm.prune(torch.randn(8, 256), "2:128")
    with pytest.raises(PatternError, match=r"M = 100 > 64"):
        cutlass_nm.compress(torch.zeros(8, 256), "3:100")
    w, _ = cutlass_nm.prune(torch.randn(8, 256), "2:64")  # the largest group that runs
    assert w.pattern.m == 64


def test_public_prune_refuses_fp64():
    import cutlass_nm
    from cutlass_nm import InputError

    with pytest.raises(InputError, match=r"nm_simt, which takes the dtypes f32/f16/bf16, got a torch.float64"):
        cutlass_nm.prune(torch.randn(8, 16, dtype=torch.float64), "2:8")


@pytest.mark.parametrize("make", ["prune", "compress_prune", "compress"])
def test_non_finite_weights_are_refused(make):
    import cutlass_nm
    from cutlass_nm import InputError

    w = torch.zeros(40, 21)
    w[33, 20], w[39, 0] = float("inf"), float("nan")
    call = {"prune": lambda: cutlass_nm.prune(w, "3:7"), "compress": lambda: cutlass_nm.compress(w, "3:7"),
            "compress_prune": lambda: cutlass_nm.compress(w, "3:7", prune=True)}[make]
    with pytest.raises(InputError, match=r"2 non-finite value\(s\) \(NaN or Inf\), the first at row 33, column 20"):
        call()


@pytest.mark.parametrize("shape", [(0, 16), (16, 0)])
def test_empty_weight_is_a_shape_error_not_a_reshape_error(shape):
    import cutlass_nm
    from cutlass_nm import ShapeError

    with pytest.raises(ShapeError, match=r"out_features >= 1 and in_features >= 1"):
        cutlass_nm.prune(torch.zeros(shape), "2:8")
    with pytest.raises(ShapeError, match=r"out_features >= 1 and in_features >= 1"):
        compress_nm(torch.zeros(shape), "2:8")

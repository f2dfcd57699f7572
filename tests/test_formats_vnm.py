"""V:N:M (VENOM) format: pruning, compression, validation, round trips, column choice quality."""

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import cutlass_nm
from cutlass_nm import Pattern, SparsityError
from cutlass_nm.formats.vnm import (
    compress_vnm,
    kept_fraction,
    mask_vnm,
    unstructured_kept_fraction,
    validate_vnm,
)

patterns = st.sampled_from(["32:2:4", "32:2:7", "64:2:8", "32:2:10", "128:2:16", "32:2:20"])


@settings(max_examples=25, deadline=None)
@given(patterns, st.integers(1, 150), st.integers(1, 90), st.integers(0, 2**31 - 1))
def test_prune_compress_roundtrip(pattern, rows, k, seed):
    p = Pattern.parse(pattern)
    w = torch.randn(rows, k, generator=torch.Generator().manual_seed(seed))
    c, mask = compress_vnm(w, p, prune=True), mask_vnm(w, p)  # the format (any V, fp32); prune refuses V = 32
    dense = c.to_dense()
    assert dense.shape == w.shape
    assert torch.equal(dense, w * mask)
    assert validate_vnm(dense, p) is None
    groups = -(-k // p.m)
    assert c.values.shape == (rows, groups * 2) and c.meta.shape == (rows, groups)
    assert c.columns.shape == (-(-rows // p.v), groups, 4)
    assert (c.columns[..., :-1] < c.columns[..., 1:]).all()  # ascending, distinct
    assert torch.equal(compress_vnm(dense, p).to_dense(), dense)


def test_block_shares_columns_and_rows_keep_two():
    p = Pattern.parse("32:2:8")
    w = torch.randn(64, 64)
    mask = mask_vnm(w, p).reshape(2, 32, 8, 8)
    assert (mask.any(1).sum(-1) <= 4).all()
    assert (mask.sum(-1) == 2).all()


def test_validate_names_the_violation():
    p = Pattern.parse("32:2:8")
    w = torch.zeros(32, 16)
    w[0, :5] = 1.0
    assert "keeps 5 > 2" in validate_vnm(w, p) or "> 4 columns" in validate_vnm(w, p)
    w = torch.zeros(32, 16)
    for r in range(5):
        w[r, r] = 1.0
    assert "5 > 4 columns of group 0" in validate_vnm(w, p)
    with pytest.raises(SparsityError):
        compress_vnm(w, p)


def test_exact_choice_is_optimal_on_a_small_case():
    import itertools

    p = Pattern.parse("32:2:6")
    w = torch.randn(32, 6, generator=torch.Generator().manual_seed(3))
    best = max(w.abs()[:, list(s)].topk(2, dim=1).values.sum().item() for s in itertools.combinations(range(6), 4))
    assert kept_fraction(w, mask_vnm(w, p, exact=True)) * w.abs().sum().item() == pytest.approx(best, rel=1e-6)


@pytest.mark.parametrize("pattern", ["128:2:8", "64:2:10", "32:2:16"])
def test_fast_choice_is_close_to_exact(pattern):
    w = torch.randn(256, 640, generator=torch.Generator().manual_seed(0))
    p = Pattern.parse(pattern)
    exact = kept_fraction(w, mask_vnm(w, p, exact=True))
    fast = kept_fraction(w, mask_vnm(w, p, exact=False))
    assert fast >= 0.99 * exact


def test_structured_keeps_less_than_unstructured():
    w = torch.randn(256, 512)
    p = Pattern.parse("128:2:8")
    assert kept_fraction(w, mask_vnm(w, p)) < unstructured_kept_fraction(w, p.density)


@pytest.mark.parametrize("pattern,k", [("128:2:7", 100), ("64:2:8", 64), ("32:2:10", 75)])
def test_gathered_24_view_is_the_weight_over_its_gathered_columns(pattern, k):
    """Kernels run A = gathered_24() against B rows gathered by gather_index(): check that pairing."""
    torch.manual_seed(0)
    w = torch.randn(200, k)
    c = compress_vnm(w, pattern, prune=True)
    g, idx = c.gathered_24(), c.gather_index()
    v = c.pattern.v
    assert idx.dtype == torch.int32 and idx.shape == (-(-200 // v), 4 * c.groups)
    assert bool((idx[:, 1:] > idx[:, :-1]).all()) and int(idx.max()) < c.padded_k
    padded = torch.zeros(200, c.padded_k)
    padded[:, :k] = c.to_dense()
    rows = torch.arange(200)
    expect = padded[rows[:, None], idx[rows // v].long()]
    assert torch.equal(g.to_dense(), expect)
    x = torch.randn(5, c.padded_k)
    x[:, k:] = 0
    y = torch.stack([g.to_dense()[r] @ x[:, idx[r // v].long()].T for r in range(200)], dim=1)
    torch.testing.assert_close(y, x[:, :k] @ c.to_dense().T, rtol=1e-5, atol=1e-5)


def _emulate_mode3(values, cols, stride, rows, m, v):
    """The dense weight nm_decode mode 3 computes from ``decode_vnm_layout``, read as the H100 reads mma.sp.m16n8k32
    operands: lane 4 g + c's A registers hold (row g, group c), (g + 8, c), (g, c + 4), (g + 8, c + 4); the tile's
    metadata word for (row r, group c) is lane 4 g + 2 tile + c // 4's, nibble 4 (c % 4) + 16 (r >= 8)."""
    gp = stride // 2
    blocks, steps = -(-rows // 32), gp // 8
    packed = values.reshape(blocks, steps, 576)
    dense = torch.zeros(blocks * 32, gp * m, dtype=torch.float64)
    for b, s, t, lane in itertools.product(range(blocks), range(steps), range(2), range(32)):
        frag = packed[b, s, :512].reshape(2, 32, 8)[t, lane].double()
        words = packed[b, s, 512:].contiguous().view(torch.int32)
        g, c = divmod(lane, 4)
        for i, (r, ch) in enumerate(((g, c), (g + 8, c), (g, c + 4), (g + 8, c + 4))):
            row, grp = 32 * b + 16 * t + r, 8 * s + ch
            word = int(words[4 * g + 2 * t + ch // 4]) & 0xFFFFFFFF
            nib = word >> (4 * (ch % 4) + (16 if r >= 8 else 0)) & 0xF
            gathered = cols.reshape(-1, gp, 4)[min(row, rows - 1) // v, grp]
            for val, pos in ((frag[2 * i], nib & 3), (frag[2 * i + 1], nib >> 2)):
                dense[row, grp * m + int(gathered[pos])] += val
    return dense


@pytest.mark.parametrize("pattern,n,k", [("128:2:8", 300, 1003), ("32:2:10", 64, 250), ("64:2:7", 100, 77)])
def test_decode_vnm_layout_round_trip(pattern, n, k):
    """The sparse-tensor-core decode layout (fragments, metadata words, gathered columns, padded groups and rows)
    reproduces the weight exactly when read the way the hardware reads it."""
    from cutlass_nm.formats.vnm import decode_vnm_layout

    w = compress_vnm(torch.randn(n, k, dtype=torch.float16, generator=torch.Generator().manual_seed(3)), pattern,
                     prune=True)
    values, cols, stride = decode_vnm_layout(w)
    dense = _emulate_mode3(values, cols, stride, n, w.pattern.m, w.pattern.v)
    assert torch.equal(dense[:n, :k], w.to_dense().double()) and not dense[:n, k:].any() and not dense[n:].any()


def test_decode_vnm_layout_is_the_same_built_in_chunks(monkeypatch):
    """Built a 32-row block at a time (small temporaries), the decode layout is bit for bit the one built at once,
    tail rows included."""
    from cutlass_nm.formats import vnm

    w = compress_vnm(torch.randn(300, 1003, dtype=torch.float16, generator=torch.Generator().manual_seed(4)),
                     "128:2:8", prune=True)
    whole = vnm.decode_vnm_layout(w)
    monkeypatch.setattr(vnm, "CHUNK_BLOCKS", 1)
    chunked = vnm.decode_vnm_layout(w)
    assert whole[2] == chunked[2] and all(torch.equal(a, b) for a, b in zip(whole[:2], chunked[:2], strict=True))


def test_public_prune_refuses_v32_and_fp32_naming_the_rule():
    """V = 32 runs only at m <= 16 (the decode families): the GEMM tiles of m > 16 take V % 64 == 0, so prune
    refuses it up front; an fp32 V:N:M weight has no family at all."""
    from cutlass_nm import InputError, PatternError

    with pytest.raises(PatternError, match=r"V = 32: V:N:M runs at m > 16 tokens on vnm_sm90.*V % 64 == 0"):
        cutlass_nm.prune(torch.randn(64, 64, dtype=torch.float16), "32:2:8")
    with pytest.raises(PatternError, match=r"V % 64 == 0"):
        cutlass_nm.compress(torch.zeros(64, 64, dtype=torch.float16), "32:2:8")
    with pytest.raises(InputError, match=r"vnm_sm90, which takes the dtypes f16/bf16"):
        cutlass_nm.prune(torch.randn(64, 64), "64:2:8")
    w, _ = cutlass_nm.prune(torch.randn(64, 64, dtype=torch.bfloat16), "64:2:8")
    assert w.pattern.v == 64


@pytest.mark.parametrize("make", [lambda w: cutlass_nm.prune(w, "64:2:8"),
                                  lambda w: cutlass_nm.compress(w, "64:2:8", prune=True),
                                  lambda w: cutlass_nm.compress(w, "64:2:8")])
def test_non_finite_weights_are_refused(make):
    from cutlass_nm import InputError

    w = torch.zeros(70, 20, dtype=torch.float16)
    w[65, 7] = float("nan")
    with pytest.raises(InputError, match=r"1 non-finite value\(s\) \(NaN or Inf\), the first at row 65, column 7"):
        make(w)


@pytest.mark.parametrize("shape", [(0, 64), (64, 0)])
def test_empty_weight_is_a_shape_error_not_a_zero_division(shape):
    from cutlass_nm import ShapeError

    with pytest.raises(ShapeError, match=r"out_features >= 1 and in_features >= 1"):
        cutlass_nm.prune(torch.zeros(shape, dtype=torch.float16), "64:2:8")
    with pytest.raises(ShapeError, match=r"out_features >= 1 and in_features >= 1"):
        compress_vnm(torch.zeros(shape), Pattern.parse("64:2:8"))


@pytest.mark.parametrize("k", [256, 200])
def test_padded_24_shares_aligned_weights(k):
    """The GEMM operand pads K to the alignment; where none is needed it is the weight's own tensors (no copy)."""
    w = compress_vnm(torch.randn(64, k), Pattern.parse("32:2:8"), prune=True)
    w24 = w.padded_24(128)
    aligned = 4 * w.groups % 128 == 0
    assert (w24.values.data_ptr() == w.values.data_ptr()) is aligned
    assert w24.shape == (64, w.gathered_k(128))
    assert torch.equal(w24.values[:, : 2 * w.groups], w.values)
    assert torch.equal(w24.groups()[:, : w.groups], w.meta)
    assert torch.equal(w24.values[:, 2 * w.groups:], torch.zeros_like(w24.values[:, 2 * w.groups:]))

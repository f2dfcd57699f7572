import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cutlass_nm import InputError, SparsityError, compress, prune
from cutlass_nm.formats import compress_24, mask_24, meta_sm80, meta_sm90, validate_24

shapes = st.tuples(st.integers(1, 150), st.integers(1, 80).map(lambda g: 4 * g))
dtypes = st.sampled_from([torch.float16, torch.bfloat16, torch.float32])


def _rand(rows, k, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, k, generator=g).to(dtype)


@settings(max_examples=40, deadline=None)
@given(shapes, dtypes, st.integers(0, 2**31 - 1))
def test_prune_keeps_two_largest_of_four(shape, dtype, seed):
    w = _rand(*shape, dtype, seed)
    mask = mask_24(w)
    groups = mask.reshape(shape[0], -1, 4)
    assert (groups.sum(-1) == 2).all()
    mag = w.abs().float().reshape(shape[0], -1, 4)
    kept_min = mag.masked_fill(~groups, float("inf")).min(-1).values
    dropped_max = mag.masked_fill(groups, -1.0).max(-1).values
    assert (kept_min >= dropped_max).all()


@settings(max_examples=40, deadline=None)
@given(shapes, st.sampled_from([torch.float16, torch.bfloat16]), st.integers(0, 2**31 - 1))
def test_compress_roundtrip(shape, dtype, seed):
    w = _rand(*shape, dtype, seed)
    c, mask = prune(w, "2:4")
    assert torch.equal(c.to_dense(), w * mask)
    assert c.values.shape == (shape[0], shape[1] // 2)
    pos = c.positions()
    assert (pos[..., 0] < pos[..., 1]).all()  # ordered metadata
    again = compress(c.to_dense(), "2:4")
    assert torch.equal(again.to_dense(), c.to_dense())


@settings(max_examples=30, deadline=None)
@given(shapes, st.sampled_from([(32, 16), (64, 16), (128, 16), (64, 8), (128, 8)]), st.integers(0, 2**31 - 1))
def test_sm90_layout_roundtrip_and_bijective(shape, atom_bits, seed):
    atom_k, bits = atom_bits  # bits: A's element width (8: FP8)
    c = compress_24(_rand(*shape, torch.float16, seed), prune=True)
    e = meta_sm90.to_sm90(c, atom_k, bits)
    assert torch.equal(meta_sm90.from_sm90(e, *shape, atom_k, bits), c.groups())
    rows_a, k_a = meta_sm90.padded_shape(*shape, atom_k)
    off = meta_sm90.byte_offsets(rows_a, k_a, atom_k, bits=bits).flatten()
    assert torch.equal(off.sort().values, torch.arange(e.numel()))

@pytest.mark.parametrize("bits", [16, 8])
def test_sm90_layout_built_in_row_chunks_equals_one_pass(monkeypatch, bits):
    """to_sm90 fills the buffer CHUNK_ROWS rows at a time (bounded temporaries): chunks of 64 rows, including a
    partial last one, give the same bytes as one pass."""
    w, _ = prune(torch.randn(300, 512, dtype=torch.float16), "2:4")
    whole = meta_sm90.to_sm90(w, 128, bits)
    monkeypatch.setattr(meta_sm90, "CHUNK_ROWS", 64)
    assert torch.equal(meta_sm90.to_sm90(w, 128, bits), whole)



@settings(max_examples=30, deadline=None)
@given(shapes, st.integers(0, 2**31 - 1))
def test_sm80_layout_roundtrip_and_bijective(shape, seed):
    c = compress_24(_rand(*shape, torch.bfloat16, seed), prune=True)
    e = meta_sm80.to_sm80(c)
    assert torch.equal(meta_sm80.from_sm80(e, *shape), c.groups())
    off = meta_sm80.element_offsets(*meta_sm80.padded_shape(*shape)).flatten()
    assert torch.equal(off.sort().values, torch.arange(e.numel()))


def test_sm80_reorder_matches_rule():
    # row r of a 32-row group moves to 4*(r%8) + r//8, then 2x2 blocks are transposed
    off = meta_sm80.element_offsets(256, 8)
    rows_p = 256
    for r, c in [(0, 0), (1, 0), (8, 0), (9, 1), (31, 7), (33, 2)]:
        dr = (r // 32) * 32 + (r % 8) * 4 + (r % 32) // 8
        dc = c
        if dr % 2 == 0 and dc % 2 == 1:
            dr, dc = dr + 1, dc - 1
        elif dr % 2 == 1 and dc % 2 == 0:
            dr, dc = dr - 1, dc + 1
        assert off[r, c] == (dc // 2) * 2 * rows_p + dr * 2 + dc % 2


def test_validate_reports_offending_groups():
    w = torch.zeros(3, 8, dtype=torch.float16)
    w[1, 4:7] = 1.0  # three nonzeros in row 1, group 1
    w[2, 0:2] = 1.0
    bad = validate_24(w)
    assert bad.tolist() == [[1, 1]]
    with pytest.raises(SparsityError, match=r"row 1, columns 4\.\.7"):
        compress(w, "2:4")


def test_compress_keeps_sparser_than_24_groups():
    w = torch.zeros(2, 8, dtype=torch.float16)
    w[0, 3] = 5.0  # one nonzero: still valid 2:4
    c = compress(w, "2:4")
    assert torch.equal(c.to_dense(), w)


@pytest.mark.parametrize(
    ("w", "fragment"),
    [(torch.randn(4, 6).half(), "in_features % 4"), (torch.randn(4, 8).to(torch.int32), "dtype"),
     (torch.randn(2, 4, 8).half(), "2-D")],
)
def test_bad_weights(w, fragment):
    with pytest.raises(InputError, match=fragment):
        compress(w, "2:4", prune=True)


def test_general_nm_patterns_get_their_own_format():
    from cutlass_nm import NMWeight

    w, mask = prune(torch.randn(32, 16), "2:8")
    assert isinstance(w, NMWeight) and mask.float().mean() == 0.25


def test_fp32_24_weight_is_refused_naming_the_rule():
    """An fp32 2:4 weight can never run (Sparse Tensor Cores take fp16/bf16): prune and compress refuse it."""
    w = torch.randn(8, 16)
    for call in (lambda: prune(w, "2:4"), lambda: compress(w, "2:4", prune=True), lambda: compress(w * 0, "2:4")):
        with pytest.raises(InputError, match=r"sptc24_sm90, which takes the dtypes f16/bf16.*w\.half\(\)"):
            call()
    assert compress_24(w, prune=True).dtype == torch.float32  # the format itself stays dtype-agnostic


@pytest.mark.parametrize("make", [lambda w: prune(w, "2:4"), lambda w: compress(w, "2:4", prune=True),
                                  lambda w: compress(w, "2:4")])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_weights_are_refused_with_count_and_position(make, bad):
    w = torch.zeros(6, 16, dtype=torch.float16)
    w[3, 9] = w[5, 2] = bad
    with pytest.raises(InputError, match=r"2 non-finite value\(s\) \(NaN or Inf\), the first at row 3, column 9"):
        make(w)


@pytest.mark.parametrize("shape", [(0, 16), (8, 0), (0, 0)])
def test_empty_weights_are_a_shape_error(shape):
    from cutlass_nm import ShapeError

    w = torch.zeros(shape, dtype=torch.float16)
    with pytest.raises(ShapeError, match=r"out_features >= 1 and in_features >= 1"):
        prune(w, "2:4")
    with pytest.raises(ShapeError, match=r"out_features >= 1 and in_features >= 1"):
        compress(w, "2:4")


@settings(max_examples=30, deadline=None)
@given(shapes, st.integers(0, 2**31 - 1))
def test_packed_meta_is_the_sm90_layout_and_unpacks(shape, seed):
    """The canonical metadata is the sm90 64-column atom layout (what the GEMMs and decode24 read) as slabs x
    8·rows_a, every padding nibble a valid pair, and unpacks to the per-group nibbles."""
    c = compress_24(_rand(*shape, torch.float16, seed), prune=True)
    rows_a, k_a = meta_sm90.padded_shape(*shape, 64)
    assert c.meta.shape == (k_a // 64, 8 * rows_a) and c.meta.is_contiguous()
    groups = c.groups()
    assert groups.shape == (shape[0], shape[1] // 4) and int(groups.max()) < 16
    assert torch.equal(c.meta.reshape(-1), meta_sm90.from_groups(groups, shape[1]))
    lo, hi = c.meta & 0xF, c.meta >> 4
    assert ((lo & 3) < (lo >> 2)).all() and ((hi & 3) < (hi >> 2)).all()


def test_kernel_offsets_read_each_chunk_of_a_stacked_row():
    """decode24's kernel reads the uint16 of 16 columns of a row at slab·pitch + (row / 64)·512 + (row % 8)·8 +
    ((row / 8) % 2)·2 + ((row / 16) % 4)·128 + (chunk % 2)·64 + ((chunk / 2) % 2)·4: in a stack's column slice
    (pitch: the stack's) that gives every part's nibbles."""
    parts = [compress_24(_rand(n, 192, torch.float16, n), prune=True) for n in (128, 64, 40)]
    stack = torch.cat([p.meta for p in parts], dim=1)
    start = 0
    for part in parts:
        rows = part.shape[0]
        view = stack[:, 8 * start: 8 * (start + meta_sm90.padded_shape(rows, 192, 64)[0])]
        assert torch.equal(meta_sm90.unpack(view, rows, 192), part.groups())
        pitch, base = view.stride(0), view.storage_offset()
        groups = part.groups()
        for row in range(rows):
            for chunk in range(192 // 16):
                at = base + (chunk // 4) * pitch + (row // 64) * 512 + (row % 8) * 8 + ((row // 8) % 2) * 2 + \
                    ((row // 16) % 4) * 128 + (chunk % 2) * 64 + ((chunk // 2) % 2) * 4
                word = int(stack.reshape(-1)[at]) | int(stack.reshape(-1)[at + 1]) << 8
                assert [(word >> (4 * g)) & 0xF for g in range(4)] == groups[row, 4 * chunk: 4 * chunk + 4].tolist()
        start += rows


def test_a_weight_refuses_metadata_of_another_shape():
    """Per-group nibbles (rows x k/4) are not the canonical form: the weight says how to build one from them."""
    from cutlass_nm.errors import ShapeError
    from cutlass_nm.formats import Sparse24Weight

    c = compress_24(_rand(64, 64, torch.float16, 0), prune=True)
    with pytest.raises(ShapeError, match=r"meta is uint8 of shape \(1, 512\).*Sparse24Weight.from_groups"):
        Sparse24Weight(c.values, c.groups(), c.shape)
    assert torch.equal(Sparse24Weight.from_groups(c.values, c.groups(), c.shape).meta, c.meta)


def test_sm90_kernels_read_the_canonical_metadata_in_place():
    """The 64-column 16-bit layout is the weight's own metadata (a stack's part: its column slice, the stack's
    pitch); one that TMA cannot read (a slab start not 16-byte aligned) is copied."""
    from cutlass_nm.formats import Sparse24Weight

    c = compress_24(_rand(192, 128, torch.float16, 3), prune=True)
    e = meta_sm90.to_sm90(c, 64)
    assert e.data_ptr() == c.meta.data_ptr() and e is not c.meta
    part = Sparse24Weight(c.values[64:128], c.meta[:, 512:1024], (64, 128))
    e = meta_sm90.to_sm90(part, 64)
    assert e.data_ptr() == part.meta.data_ptr() and e.stride(0) == c.meta.stride(0) == 8 * 192
    odd = torch.empty(2 * c.meta.numel() + 1, dtype=torch.uint8)[1: c.meta.numel() + 1].view(c.meta.shape)
    odd.copy_(c.meta)
    e = meta_sm90.to_sm90(Sparse24Weight(c.values, odd, c.shape), 64)
    assert e.data_ptr() % 16 == 0 and torch.equal(e, c.meta)

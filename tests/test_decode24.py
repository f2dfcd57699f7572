"""2:4 on the decode path (CPU): the decode24 family's rules, heuristic and plan, the template's 2:4 meta-byte index
format, the weight read in place, and routing (decode24 at m <= DECODE24_MAX_M with k % 16 == 0, else sptc24)."""

from __future__ import annotations

import itertools

import pytest
import torch

from cutlass_nm import ShapeError
from cutlass_nm.arch import HOPPER
from cutlass_nm.families import FAMILIES, KernelTypes, Problem, get_family
from cutlass_nm.families.decode24.family import in_place_layout
from cutlass_nm.families.launch import DeviceInfo
from cutlass_nm.families.nm_decode.family import SMEM_BUDGET, fixed_smem, plan
from cutlass_nm.formats import NMWeight, Sparse24Weight, VNMWeight, compress_24
from cutlass_nm.routing import DECODE24_MAX_M, decode_family, default_family

F16 = KernelTypes("f16", "f16", False)
FAM = get_family("decode24")
SIMT = get_family("nm_decode_simt")
SHAPES = (1024, 4096, 11008, 14336)


def _p(m: int, n: int = 4096, k: int = 4096, types: KernelTypes = F16, pattern: str = "2:4") -> Problem:
    return Problem(m, n, k, types, pattern)


def test_registered_like_the_other_families():
    assert FAMILIES["decode24"] is FAM and FAM.weight is Sparse24Weight and FAM.runs(Sparse24Weight)
    assert not FAM.runs(NMWeight) and not FAM.runs(VNMWeight)
    assert FAM.templates == SIMT.templates and FAM.input_dtypes == ("f16", "bf16")
    assert "families/nm_decode/family.py" in FAM.fingerprint_files()
    assert FAM.Config.from_record(FAM.Config().to_record()) == FAM.Config()


def test_template_renders_the_meta24_format():
    """decode24 substitutes kMeta24 = true into mode 0; the other decode families render it false."""
    cfg = FAM.Config(max_tokens=1, warps=8, rows=2, ahead=2)
    src = FAM.source(cfg, KernelTypes("bf16", "f32", True))
    assert "constexpr bool kMeta24 = true;" in src and "constexpr int kMode = 0;" in src
    assert "using Element = __nv_bfloat16;" in src and "constexpr int kMaxTokens = 1;" in src and "${" not in src
    simt = SIMT.source(SIMT.Config(max_tokens=1, warps=8, rows=2, ahead=2), KernelTypes("bf16", "f32", True))
    assert "constexpr bool kMeta24 = false;" in simt
    tc = get_family("nm_decode")
    assert "constexpr bool kMeta24 = false;" in tc.source(tc.Config(max_tokens=8), F16)
    # the same kernel otherwise: only the format constant differs
    assert src.replace("kMeta24 = true;", "kMeta24 = false;") == simt


def _byte_perm(x: int, y: int, selector: int) -> int:
    """CUDA's __byte_perm (default mode): result byte i is byte (selector nibble i) of the 8 bytes y:x."""
    data = (y << 32 | x).to_bytes(8, "little")
    return int.from_bytes(bytes(data[(selector >> 4 * i) & 7] for i in range(4)), "little")


def test_meta_byte_arithmetic_of_the_template():
    """The two bit tricks the kernel uses, on every ordered pair of positions: offsets() spreads a chunk's 4 meta
    bytes into 8 offsets (nonzero 2 g + j at (byte g >> 2 j) & 3), and the one-token selector picks columns p0, p1
    of a group's 4 x values held in two 32-bit words."""
    src = FAM.source(FAM.Config(max_tokens=1), F16)
    assert "0x1010u + 0x22u * (b & 3u) + 0x880u * (b & 0xcu)" in src
    assert "__byte_perm(first, second, 0x5140), __byte_perm(first, second, 0x7362)" in src
    pairs = [(a, b) for a in range(4) for b in range(a + 1, 4)]
    for chunk in itertools.product(pairs, repeat=4):
        meta = sum((p0 | p1 << 2) << 8 * g for g, (p0, p1) in enumerate(chunk))
        first, second = meta & 0x03030303, (meta >> 2) & 0x03030303
        offsets = (_byte_perm(first, second, 0x5140) | _byte_perm(first, second, 0x7362) << 32).to_bytes(8, "little")
        assert list(offsets) == [p for pair in chunk for p in pair]
    cols = [0x1111 * (c + 1) for c in range(4)]  # four distinct 16-bit x values
    lo, hi = cols[0] | cols[1] << 16, cols[2] | cols[3] << 16
    for p0, p1 in pairs:
        b = p0 | p1 << 2
        sel = 0x1010 + 0x22 * (b & 3) + 0x880 * (b & 0xC)
        assert _byte_perm(lo, hi, sel) == cols[p0] | cols[p1] << 16


def test_rules():
    cfg = FAM.Config(max_tokens=16)
    assert FAM.check(cfg, _p(16)) is None
    assert "k % 16 == 0" in FAM.check(cfg, _p(16, k=4104)) and "sptc24" in FAM.check(cfg, _p(16, k=4104))
    assert "exceeds" in FAM.check(cfg, _p(17))
    assert "exceeds" in FAM.check(FAM.Config(max_tokens=4), _p(8))
    assert "2:4" in FAM.check(cfg, _p(4, pattern="2:8"))
    assert "fp16/bf16" in FAM.check(cfg, _p(4, types=KernelTypes("f32", "f32", False)))
    assert "output" in FAM.check(cfg, _p(4, types=KernelTypes("f16", "bf16", False)))
    assert FAM.check(cfg, _p(4, types=KernelTypes("bf16", "f32", True))) is None
    assert "accumulators" in FAM.check(FAM.Config(max_tokens=16, rows=8), _p(16))
    assert "its own Config" in FAM.check(SIMT.Config(max_tokens=16), _p(16))
    assert "its own Config" in SIMT.check(FAM.Config(max_tokens=16), Problem(16, 4096, 4096, F16, "2:8", 1))


def test_heuristic_is_valid_and_in_the_space():
    space = FAM.space()
    for m, n, k in itertools.product(range(1, 17), SHAPES, SHAPES):
        p = _p(m, n, k)
        cfg = FAM.heuristic(p)
        assert FAM.check(cfg, p) is None, (p, cfg)
        assert cfg.max_tokens >= m and (m == 1) == (cfg.max_tokens == 1)
        assert all(val in space[key] for key, val in cfg.to_record().items()), cfg
        assert FAM.Config.from_record(cfg.to_record()) == cfg


def test_one_token_heuristic_avoids_thin_last_waves():
    """One token: 8 warps of one row below 2^25 weights; above, 2 rows a warp unless the grid would end in a thin
    last wave (11008 x 4096: 688 or 1376 CTAs for 660 or 1320 resident); the H100 sweeps' picks."""
    picks = {(n, k): (c.warps, c.rows) for n, k in ((4096, 4096), (1024, 4096), (11008, 4096), (14336, 4096),
                                                     (4096, 14336), (8192, 8192), (28672, 8192))
             for c in [FAM.heuristic(_p(1, n, k))]}
    assert picks == {(4096, 4096): (8, 1), (1024, 4096): (8, 1), (11008, 4096): (8, 1), (14336, 4096): (4, 2),
                     (4096, 14336): (4, 2), (8192, 8192): (4, 2), (28672, 8192): (4, 2)}
    assert all(FAM.heuristic(_p(1, n, k)).ahead == 1 for n, k in picks)


@pytest.mark.parametrize("n,k", [(4096, 4096), (11008, 4096), (4096, 11008), (1024, 4096), (28672, 8192),
                                 (64, 16384), (1000, 1008)])
@pytest.mark.parametrize("m", [1, 2, 5, 16])
def test_plan_pieces_fit_and_cover(n, k, m):
    """The heuristic's launch: every CTA's x piece fits shared memory, and the 4096² one-token grid fills the GPU."""
    cfg = FAM.heuristic(_p(m, n, k))
    stride = k // 2
    split, piece, smem = plan(cfg, n, stride, 2, 4, HOPPER.sm_count)
    assert 1 <= split <= 8 and smem <= SMEM_BUDGET
    chunks = stride // 8
    for s in range(split):
        cb, ce = chunks * s // split, chunks * (s + 1) // split
        for p0 in range(cb, ce, piece):
            p1 = min(p0 + piece, ce)
            cols = ((p1 * 8 - 1) // 2 - p0 * 8 // 2 + 1) * 4
            assert cfg.max_tokens == 1 or fixed_smem(cfg) + cols * 2 * cfg.max_tokens <= smem
    if (n, k) == (4096, 4096):
        assert -(-n // cfg.block_rows) * split >= 2 * HOPPER.sm_count


def _xs_offset(c: int, q: int, tokens: int) -> int:
    """The template's xs_offset: unit c * units_per_col + q, XOR-swizzled inside its 128-byte line (in elements)."""
    unit = min(tokens, 8)
    per_row = 64 // unit
    u = c * (tokens // unit) + q
    return (u ^ ((u // per_row) % per_row)) * unit


@pytest.mark.parametrize("tokens", [2, 4, 8, 16])
@pytest.mark.parametrize("warps,rows", [(4, 1), (4, 2), (16, 1)])
@pytest.mark.parametrize("n,k", [(1000, 1008), (4096, 4096), (64, 16384)])
def test_plan_covers_the_swizzled_lines(tokens, warps, rows, n, k):
    """Mode 0 swizzles staged x inside 128-byte lines: a piece's last, partial line is read and written whole, so
    the shared memory plan() asks for covers it (4 warps of 1 row at 2 tokens on 1000 x 1008 ran past it)."""
    cfg = FAM.Config(max_tokens=tokens, warps=warps, rows=rows)
    split, piece, smem = plan(cfg, n, k // 2, 2, 4, HOPPER.sm_count)
    chunks = k // 16
    for s in range(split):
        cb, ce = chunks * s // split, chunks * (s + 1) // split
        for p0 in range(cb, ce, piece):
            p1 = min(p0 + piece, ce)
            ncols = ((p1 * 8 - 1) // 2 - p0 * 8 // 2 + 1) * 4  # stage_x's columns
            top = max(_xs_offset(c, q, tokens) for c in range(ncols) for q in range(max(1, tokens // 8)))
            assert fixed_smem(cfg) + (top + min(tokens, 8)) * 2 <= smem


def test_weight_is_read_in_place():
    """No decode copy: the launcher's operands alias the weight's own values and meta (k / 2 values a row); a
    misaligned view is copied once; k % 16 != 0 is refused with the rule."""
    w = compress_24(torch.randn(40, 64), prune=True)
    values, meta, stride = in_place_layout(w)
    assert (values.data_ptr(), meta.data_ptr(), stride) == (w.values.data_ptr(), w.meta.data_ptr(), 32)
    assert meta is not w.meta  # an alias: the cached layout must not keep the weight's metadata tensor alive
    base = torch.zeros(40 * 32 + 1, dtype=w.values.dtype)
    shifted = base[1:].view(40, 32)  # 2 bytes past an aligned address
    shifted.copy_(w.values)
    view = Sparse24Weight(shifted, w.meta, w.shape)
    values, meta, _ = in_place_layout(view)
    assert values.data_ptr() % 16 == 0 and torch.equal(values, w.values) and meta.data_ptr() == w.meta.data_ptr()
    with pytest.raises(ShapeError, match="k % 16 == 0"):
        in_place_layout(compress_24(torch.randn(8, 72), prune=True))


def test_routing_sends_2_4_decode_to_decode24(monkeypatch):
    """m <= DECODE24_MAX_M and k % 16 == 0: decode24 (on sm_90 and sm_80); above, k % 16 != 0 or k unknown: the
    sptc24 GEMM of the GPU."""
    from cutlass_nm import routing

    dev = torch.device("cuda")
    monkeypatch.setattr(routing, "device_info", lambda d: DeviceInfo(132, (9, 0), "H100"))
    assert [default_family(dev, Sparse24Weight, m, k=4096) for m in range(1, DECODE24_MAX_M + 1)] == [
        "decode24"] * DECODE24_MAX_M
    assert default_family(dev, Sparse24Weight, DECODE24_MAX_M, torch.bfloat16, "2:4", k=11008) == "decode24"
    assert default_family(dev, Sparse24Weight, DECODE24_MAX_M + 1, k=4096) == "sptc24_sm90"
    assert default_family(dev, Sparse24Weight, 2048, k=4096) == "sptc24_sm90"
    assert default_family(dev, Sparse24Weight, 1, k=4104) == "sptc24_sm90"  # k % 16 != 0: not read in place
    assert default_family(dev, Sparse24Weight, 1) == "sptc24_sm90"  # k unknown
    assert default_family(None, Sparse24Weight, 1, k=4096) == "decode24"
    assert decode_family(Sparse24Weight) == "decode24"
    monkeypatch.setattr(routing, "device_info", lambda d: DeviceInfo(108, (8, 0), "A100"))
    assert default_family(dev, Sparse24Weight, 1, k=4096) == "decode24"
    assert default_family(dev, Sparse24Weight, 64, k=4096) == "sptc24_sm80"
    # the other weight kinds are routed as before
    assert 1 <= DECODE24_MAX_M <= 16  # the decode path's range
    assert default_family(dev, NMWeight, 4, pattern="2:8", vector=1, k=4096) == "nm_decode_simt"
    assert default_family(dev, VNMWeight, 4, pattern="128:2:8", k=4096) == "nm_decode"


@pytest.mark.nvcc
def test_source_compiles(isolated_cache):
    """One-token (the byte-permute path) and several-token (staged x, transposed gathers) 2:4 kernels build."""
    from cutlass_nm.kernels import precompile

    kids = [(FAM.name, FAM.Config(max_tokens=1, warps=8, rows=2, ahead=2), F16),
            (FAM.name, FAM.Config(max_tokens=16, warps=16, transpose=1, push=1), KernelTypes("bf16", "f32", True))]
    assert not [r for r in precompile(kids, workers=2) if isinstance(r, Exception)]

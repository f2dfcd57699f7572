"""Family interface: config spaces, validity rules, strict record parsing, emitted source."""

import itertools
import math

import pytest

from cutlass_nm import ConfigError
from cutlass_nm.families import FAMILIES, KernelTypes, Problem, get_family
from cutlass_nm.formats.nm import NMWeight
from cutlass_nm.formats.vnm import VNMWeight
from cutlass_nm.patterns import Pattern

F16 = KernelTypes("f16", "f16", False)
SM90, SM80 = get_family("sptc24_sm90"), get_family("sptc24_sm80")
# the fused gate/up kernel runs only fused weights, the FP8 N:M decode N:M weights; the others any problem
PATTERN = {"vnm_glu_sm90": "256:2:8", "nm_decode_fp8": "2:8", "vnm_fp8_sm90": "128:2:8"}
VECTOR = {"nm_decode": 32}  # tensor-core decode: N:M weights whose positions 32 rows share
DECODE = ("nm_decode", "nm_decode_simt", "decode24")  # m <= 16 only
ONE_TOKEN = ("decode24_fp8", "nm_decode_fp8")  # m = 1 only
SIMT = get_family("nm_decode_simt")


# FP8 inputs; the others fp16 (decode24_fp8: x)
TYPES = {name: KernelTypes("e4m3", "bf16", False) for name in ("sptc24_fp8_sm90", "vnm_fp8_sm90")}


def _problem(family, m: int) -> Problem:
    return Problem(m, 4096, 4096, TYPES.get(family.name, F16), PATTERN.get(family.name, "2:4"),
                   VECTOR.get(family.name, 0))


@pytest.mark.parametrize("family", list(FAMILIES.values()), ids=list(FAMILIES))
def test_every_family_reads_alike(family):
    space = family.space()
    assert space and all(isinstance(v, tuple) and v for v in space.values())
    default = family.Config()
    assert family.Config.from_record(default.to_record()) == default
    for m in (1,) if family.name in ONE_TOKEN else (1, 16) if family.name in DECODE else (1, 64, 4096):
        p = _problem(family, m)
        assert family.check(family.heuristic(p), p) is None


@pytest.mark.parametrize("family", list(FAMILIES.values()), ids=list(FAMILIES))
def test_space_has_valid_and_invalid_points(family):
    p = _problem(family, 1 if family.name in ONE_TOKEN else 8 if family.name in DECODE else 2048)
    space = family.space()
    valid = set()  # walked lazily, never the whole product
    for vals in itertools.product(*space.values()):
        valid.add(family.check(family.Config(**dict(zip(space, vals, strict=True))), p) is None)
        if len(valid) == 2:
            break
    assert valid == {True, False}


@pytest.mark.parametrize(
    "record",
    [
        {"tile_m": "128); system(\"rm -rf /\"); (", "tile_n": 128, "tile_k": 64, "cluster_m": 1, "cluster_n": 2,
         "schedule": "cooperative", "stages": 0, "swizzle": 1},
        {"tile_m": 128, "tile_n": 128, "tile_k": 64, "cluster_m": 1, "cluster_n": 2,
         "schedule": "cooperative>; int x; using y = z<", "stages": 0, "swizzle": 1},
        {"tile_m": 1 << 20, "tile_n": 128, "tile_k": 64, "cluster_m": 1, "cluster_n": 2, "schedule": "cooperative",
         "stages": 0, "swizzle": 1},
        {"tile_m": 128.0, "tile_n": 128, "tile_k": 64, "cluster_m": 1, "cluster_n": 2, "schedule": "cooperative",
         "stages": 0, "swizzle": 1},
        {"tile_m": True, "tile_n": 128, "tile_k": 64, "cluster_m": 1, "cluster_n": 2, "schedule": "cooperative",
         "stages": 0, "swizzle": 1},
        {},
        {"tile_m": 128, "tile_n": 128, "tile_k": 64, "cluster_m": 1, "cluster_n": 2, "schedule": "cooperative",
         "stages": 0, "swizzle": 1, "extra": 1},
        ["not", "a", "dict"],
    ],
)
def test_hostile_records_are_rejected(record):
    with pytest.raises(ConfigError):
        SM90.Config.from_record(record)


def test_partial_records_take_defaults():
    # a record written before a parameter existed stays valid: the missing key takes its default
    cfg = SM90.Config.from_record({"tile_m": 256, "tile_n": 128, "tile_k": 128})
    assert cfg == SM90.Config(tile_m=256, tile_n=128, tile_k=128)


def test_sm90_rules():
    p = Problem(128, 4096, 4096, F16)
    assert "tile_m must be >= 128" in SM90.check(SM90.Config(tile_m=64, schedule="cooperative"), p)
    assert "<= 128" in SM90.check(SM90.Config(tile_m=256, schedule="pingpong"), p)
    assert "accumulators" in SM90.check(SM90.Config(tile_m=256, tile_n=256), p)
    assert "do not fit" in SM90.check(SM90.Config(tile_m=128, tile_n=256, tile_k=128, stages=7), p)
    assert "multiple of 16" in SM90.check(SM90.Config(), Problem(8, 4096, 4104, F16))
    assert "multiple of 8" in SM90.check(SM90.Config(), Problem(8, 4100, 4096, F16))
    assert SM90.check(SM90.Config(), Problem(8, 4100, 4096, KernelTypes("f16", "f32", False))) is None


def test_sm80_rules():
    p = Problem(128, 4096, 4096, F16)
    assert "not instantiable" in SM80.check(SM80.Config(warp_m=32), p)
    assert "tile K" in SM80.check(SM80.Config(tile_k=128, warp_n=32), Problem(8, 4096, 4160, F16))
    assert "multiple of 32" in SM80.check(SM80.Config(), Problem(8, 4112, 4096, F16))


def test_sm90_source_is_cutlass_emitted_with_our_abi():
    src = SM90.source(SM90.Config(tile_m=256, tile_n=128, tile_k=128), KernelTypes("bf16", "f32", True))
    assert "cutlass::arch::OpClassSparseTensorOp" in src
    assert "cute::Shape<cute::_256, cute::_128, cute::_128>" in src
    assert "LinCombPerRowBias<float, float, cutlass::bfloat16_t, void, float>" in src
    assert 'extern "C"' in src and "int cnm_run(" in src and "int cnm_launch(" in src
    assert "${" not in src


def test_sm80_source_is_cutlass_emitted_with_our_abi():
    src = SM80.source(SM80.Config(), F16)
    assert "cutlass::gemm::device::SparseGemm<" in src
    assert "cutlass::gemm::GemmShape<128, 128, 64>" in src
    assert 'extern "C"' in src and "${" not in src


def test_kernel_types_are_validated():
    with pytest.raises(ConfigError):
        KernelTypes("f16; evil", "f16", False)
    with pytest.raises(ConfigError):
        KernelTypes("f16", "f16", 1)  # type: ignore[arg-type]


def test_nm_decode_family():
    dec = get_family("nm_decode")
    p8 = Problem(8, 256, 256, F16, "2:8", 32)
    assert "exceeds" in dec.check(dec.Config(max_tokens=4), p8)
    assert "exceeds" in SIMT.check(SIMT.Config(max_tokens=4), p8)
    assert dec.heuristic(Problem(3, 256, 256, F16, "2:8", 32)).max_tokens == 8
    assert SIMT.heuristic(Problem(3, 256, 256, F16)).max_tokens == 4
    for fam, cfg in ((SIMT, SIMT.Config(max_tokens=8, warps=4)), (dec, dec.Config(max_tokens=8, warps=4))):
        src = fam.source(cfg, KernelTypes("bf16", "bf16", True))
        assert "using Element = __nv_bfloat16;" in src and "kMaxTokens = 8;" in src and "${" not in src
        assert f"kMode = {cfg.mode};" in src


def test_decode_split_families_share_the_template():
    """The two decode families read one template, each declaring it; nm_decode_simt's fingerprint also covers
    nm_decode's module (its plan, source and launcher)."""
    dec = get_family("nm_decode")
    assert dec.templates == SIMT.templates == ("families/nm_decode/kernel.cu", "codegen/stream_loads.cuh")
    assert "families/nm_decode/family.py" in SIMT.fingerprint_files()
    assert "mode" not in SIMT.space() and {"rows", "transpose", "max_ctas", "min_ctas"}.isdisjoint(dec.space())
    for fam in (dec, SIMT):  # every space under 100,000 points
        assert fam.runs(NMWeight) and fam.runs(VNMWeight) and fam.input_dtypes == ("f16", "bf16")
        assert 0 < math.prod(len(v) for v in fam.space().values()) <= 100_000
    # each refuses the other's config, and the template modes it does not run
    p = Problem(4, 4096, 4096, F16, "2:8", 32)
    assert "its own Config" in dec.check(SIMT.Config(max_tokens=4), p)
    assert "its own Config" in SIMT.check(dec.Config(max_tokens=4), p)
    assert "nm_decode_simt" in dec.check(dec.Config(max_tokens=4, mode=0), p)


@pytest.mark.parametrize("name,record", [
    ("nm_decode", {"max_tokens": 8, "mode": 0}),  # CUDA cores: the other family
    ("nm_decode", {"max_tokens": 8, "rows": 2}),  # a CUDA-core field
    ("nm_decode", {"max_tokens": 8, "min_ctas": 2, "max_ctas": 2}),  # the unsplit family's fields: now ctas
    ("nm_decode", {"max_tokens": 8, "ctas": 5}),
    ("nm_decode", {"max_tokens": 8, "ctas": -3}),
    ("nm_decode", {"max_tokens": 8, "ctas": "-2"}),
    ("nm_decode", {"max_tokens": 8, "mode": True}),
    ("nm_decode_simt", {"max_tokens": 8, "mode": 2}),
    ("nm_decode_simt", {"max_tokens": 8, "bulk": 1}),
    ("nm_decode_simt", {"max_tokens": 8, "wsplit": 8}),
    ("nm_decode_simt", {"max_tokens": 8.0}),
    ("nm_decode_simt", {"max_tokens": 8, "rows": "2); evil("}),
])
def test_decode_hostile_records_are_rejected(name, record):
    with pytest.raises(ConfigError):
        get_family(name).Config.from_record(record)


def test_each_family_names_its_weight_type():
    from cutlass_nm.formats import Sparse24Weight
    from cutlass_nm.formats.nm import NMWeight

    assert SM90.weight is Sparse24Weight and SM80.weight is Sparse24Weight
    assert get_family("nm_decode").weight is NMWeight and SIMT.weight is NMWeight


def test_nm_decode_mode_rules_and_layouts():
    """Modes 2 and 3: their check rules, the heuristic's choices, and the tensor-core plan (16 columns of slack)."""
    from cutlass_nm.families.nm_decode.family import SMEM_BUDGET, fixed_smem, plan

    dec = get_family("nm_decode")
    cfg = dec.Config(max_tokens=4, warps=8, ahead=2, mode=2)
    assert cfg.block_rows == 256 and cfg.unit == 16 and SIMT.Config().unit == 8 and (cfg.rows, cfg.transpose) == (1, 0)
    _, piece, smem = plan(cfg, 4096, 1024, 2, 8, 132)
    cap = (smem - fixed_smem(cfg)) // 8 - 16  # 4 fp16 tokens: 8 bytes per staged column, 16 columns of slack
    assert cap >= (16 * piece - 1) // 2 * 8 + 2 * 8 and smem <= SMEM_BUDGET  # a piece's columns fit

    assert dec.check(dec.Config(max_tokens=16, mode=2), Problem(16, 4096, 4096, F16, "2:8", 32)) is None
    assert "multiple of 32" in dec.check(dec.Config(max_tokens=16, mode=2), Problem(16, 4096, 4096, F16, "2:8", 8))
    assert "multiple of 32" in dec.check(dec.Config(max_tokens=16, mode=2), Problem(16, 4096, 4096, F16, "128:2:8"))
    assert "unknown" in dec.check(dec.Config(max_tokens=16, mode=2), Problem(16, 4096, 4096, F16, "2:8"))  # vector 0
    assert "V:N:M" in dec.check(dec.Config(max_tokens=16, mode=3), Problem(16, 4096, 4096, F16, "2:8", 32))
    assert dec.check(dec.Config(max_tokens=16, mode=3), Problem(16, 4096, 4096, F16, "32:2:8")) is None
    # the heuristic: tensor cores; V:N:M on sparse tensor cores
    assert dec.heuristic(Problem(3, 8192, 8192, F16, "2:8", 32)) == dec.Config(max_tokens=8, warps=8, ahead=2, mode=2,
                                                                                prefetch=4, ctas=3)
    assert dec.heuristic(Problem(16, 4096, 4096, F16, "2:8", 64)).mode == 2
    # values by TMA bulk copies below 2^25 weights, registers above
    assert dec.heuristic(Problem(4, 4096, 4096, F16, "2:8", 32)).bulk == 1
    # exactly 2 CTAs per SM below 2^25 weights; above, registers for 3 and a free slot for the next PDL call
    assert (dec.heuristic(Problem(4, 4096, 4096, F16, "2:8", 32)).ctas,
            dec.heuristic(Problem(4, 8192, 8192, F16, "2:8", 32)).ctas) == (-2, 3)
    # one token on >= 4096 rows and 2^25 weights: narrow x, 8 warps per 32-row block
    one = dec.heuristic(Problem(1, 4096, 11008, F16, "2:8", 32))
    assert (one.max_tokens, one.wsplit, one.split, one.block_rows, one.ctas) == (1, 8, 2, 32, 3)
    assert dec.heuristic(Problem(1, 14336, 4096, F16, "2:8", 32)).ctas == 4  # 448 CTAs: one wave at 4 per SM
    assert dec.check(one, Problem(1, 4096, 11008, F16, "2:8", 32)) is None
    assert dec.heuristic(Problem(1, 1024, 32768, F16, "2:8", 32)).wsplit == 1  # 32 CTAs would not fill the GPU
    # fewer row blocks: clusters up to ~256 CTAs (mode 2 below 4096 rows, mode 3 below 8192)
    assert [dec.heuristic(Problem(1, n, 8192, F16, p, v)).split for n, p, v in
            ((2048, "2:8", 32), (3072, "2:8", 32), (4096, "2:8", 32), (4096, "128:2:8", 0), (8192, "128:2:8", 0),
             (8192, "2:8", 32), (11008, "2:8", 32))] == [4, 2, 2, 2, 1, 2, 1]
    assert dec.heuristic(Problem(1, 8192, 8192, F16, "2:8", 32)).ctas == 4  # 512 CTAs in one wave
    assert dec.heuristic(Problem(1, 4096, 4096, F16, "1:8", 32)).wsplit == 8
    # the next PDL call released at entry: one-token N:M at k <= 4096 or in a cluster (not V:N:M)
    assert [dec.heuristic(Problem(1, n, k, F16, p, v)).early_release for n, k, p, v in
            ((4096, 4096, "1:8", 32), (11008, 4096, "2:8", 32), (4096, 11008, "2:8", 32), (8192, 8192, "2:8", 32),
             (4096, 4096, "128:2:8", 0))] == [1, 1, 1, 1, 0]  # 4096 x 11008 and 8192²: clusters of 2
    # clusters push their sums to the owner for V:N:M and small N:M weights
    assert [dec.heuristic(Problem(m, n, n, F16, p, v)).push for m, n, p, v in
            ((16, 4096, "2:8", 32), (16, 8192, "2:8", 32), (4, 8192, "128:2:8", 0), (1, 4096, "128:2:8", 0))
            ] == [1, 0, 1, 1]
    assert dec.heuristic(Problem(2, 8192, 8192, F16, "2:8", 32)).wsplit == 1
    vnm_one = dec.heuristic(Problem(1, 8192, 8192, F16, "128:2:8", 0))
    assert (vnm_one.mode, vnm_one.max_tokens, vnm_one.wsplit, vnm_one.prefetch) == (3, 1, 8, 0)
    assert dec.check(vnm_one, Problem(1, 8192, 8192, F16, "128:2:8", 0)) is None
    assert dec.heuristic(Problem(16, 4096, 4096, F16, "2:8", 32)).bulk == 1
    assert dec.heuristic(Problem(4, 8192, 8192, F16, "2:8", 32)).bulk == 0
    assert dec.heuristic(Problem(1, 4096, 4096, F16, "128:2:8")).mode == 3  # V:N:M: sparse tensor cores
    assert dec.heuristic(Problem(1, 4096, 4096, F16, "128:2:8")).prefetch == 0  # mode 3 lost with it
    # the L2 prefetch window rides the register stream only: none beside bulk rings
    assert dec.heuristic(Problem(4, 4096, 4096, F16, "2:8", 32)).prefetch == 0
    for prob in (Problem(4, 4096, 4096, F16, "2:8", 32), Problem(16, 8192, 8192, F16, "128:2:16"),
                 Problem(1, 8192, 8192, F16, "2:8", 32)):
        assert dec.check(dec.heuristic(prob), prob) is None
    # a weight the tensor cores cannot run: the heuristic's config is refused, with the family that runs it
    for prob in (Problem(16, 4096, 4096, F16, "2:8", 1), Problem(1, 8192, 8192, F16, "3:7", 16)):
        assert "nm_decode_simt" in dec.check(dec.heuristic(prob), prob)
    # the stream options' rules
    p8 = Problem(4, 8192, 8192, F16, "2:8", 32)
    assert "bulk=0" in dec.check(dec.Config(max_tokens=4, mode=2, bulk=1, prefetch=4), p8)
    assert "mode=2" in dec.check(dec.Config(max_tokens=4, mode=3, bulk=1), p8)
    assert "64 registers" in dec.check(dec.Config(max_tokens=4, mode=2, warps=16, ctas=3), p8)
    assert dec.check(dec.Config(max_tokens=4, mode=2, warps=8, ctas=4, early_release=1, prefetch=4), p8) is None


def test_nm_decode_simt_rules_and_heuristic():
    """Lanes along k on CUDA cores: any vector and V:N:M read as 2:M; rows x tokens accumulators bounded."""
    for prob in (Problem(16, 4096, 4096, F16, "2:8", 1), Problem(16, 4096, 4096, F16, "2:8", 32),
                 Problem(1, 4096, 4096, F16, "32:2:16"), Problem(3, 8192, 8192, F16, "128:2:8"),
                 Problem(1, 8192, 8192, F16, "3:7", 0)):
        cfg = SIMT.heuristic(prob)
        assert cfg.mode == 0 and SIMT.check(cfg, prob) is None
    assert SIMT.heuristic(Problem(1, 4096, 4096, F16, "1:8", 1)) == SIMT.Config(max_tokens=1, warps=4, transpose=1)
    assert SIMT.heuristic(Problem(1, 8192, 8192, F16, "3:7", 1)) == SIMT.Config(max_tokens=1, warps=16)
    assert SIMT.heuristic(Problem(5, 8192, 8192, F16, "2:8", 1)) == SIMT.Config(max_tokens=8, warps=16, rows=2)
    p = Problem(16, 4096, 4096, F16, "2:8", 1)
    assert "accumulators" in SIMT.check(SIMT.Config(max_tokens=16, rows=8), p)
    assert "fp16/bf16" in SIMT.check(SIMT.Config(), Problem(16, 4096, 4096, KernelTypes("f32", "f32", False)))


def test_nm_decode_space_holds_every_heuristic_choice():
    """The curated spaces keep every value the heuristics return (over the LLaMA-like grid, both index layouts)."""
    from cutlass_nm.routing import decode_family, weight_class

    sizes = (1024, 4096, 11008, 14336)
    pats = [(p, v) for p in ("2:8", "1:8", "3:7", "16:32") for v in (1, 32)] + [("128:2:8", 0), ("64:2:16", 0)]
    for m, n, k, (pat, vec) in itertools.product((1, 2, 3, 8, 9, 16), sizes, sizes, pats):
        fam = get_family(decode_family(weight_class(Pattern.parse(pat)), pat, vec))
        space = fam.space()
        cfg = fam.heuristic(Problem(m, n, k, F16, pat, vec))
        assert all(val in space[key] for key, val in cfg.to_record().items()), cfg
        assert fam.Config.from_record(cfg.to_record()) == cfg


def test_nm_decode_source_carries_the_host_smem_sizes():
    """The template asserts at compile time that its shared-memory sizes are the ones the host plans with."""
    dec = get_family("nm_decode")
    cfg = dec.Config(max_tokens=8, warps=8, ahead=2, mode=2, bulk=1, push=1)
    src = dec.source(cfg, F16)
    assert f"static_assert(kRingBytes == {cfg.ring_bytes}," in src and cfg.ring_bytes == 8 * 4 * 1048
    assert f"static_assert(kRedBytes == {cfg.red_bytes}," in src and cfg.red_bytes == 2 * 256 * 8 * 4 + 128
    t = SIMT.Config(max_tokens=1, warps=4, rows=2, transpose=1)
    assert "static_assert(kTransposeBytes == 1536," in SIMT.source(t, F16) and "${" not in src


def test_decode_mma_layout_is_the_a_fragment_order():
    """Lane l = 4 g + c of tile t holds rows (g, g + 8) x positions (2c, 2c + 1) of positions 0-7, then 8-15."""
    import torch

    from cutlass_nm.formats.nm import compress_nm, decode_layout, decode_mma_layout

    w = compress_nm(torch.randn(70, 100), "3:7", vector=32, prune=True)
    values, _, stride = decode_layout(w, unit=16)
    frag, _, stride2 = decode_mma_layout(w)
    assert stride2 == stride == 48 and frag.shape == (96, 48)
    frag = frag.reshape(3, stride // 16, 2, 32, 8)
    for b, s, t, lane in ((0, 0, 0, 0), (1, 2, 1, 13), (2, 1, 0, 31), (2, 2, 1, 7)):
        g, c = divmod(lane, 4)
        expect = [values[r, p].item() if r < 70 else 0.0
                  for kh in (0, 1) for half in (0, 1)
                  for r in [32 * b + 16 * t + 8 * half + g]
                  for p in (16 * s + 8 * kh + 2 * c + pair for pair in (0, 1))]
        assert frag[b, s, t, lane].tolist() == expect

"""Which weight format a pattern takes, and which kernel family runs a weight: the one place for both."""

from __future__ import annotations

import torch

from .errors import InputError, PatternError, ShapeError
from .families import FAMILIES
from .families.decode24.family import K_MULTIPLE as DECODE24_K_MULTIPLE
from .families.decode24_fp8.family import FAMILY as DECODE24_FP8
from .families.decode24_fp8.family import MAX_M as FP8_DECODE_MAX_M
from .families.launch import device_info, dtype_name
from .families.nm_decode_fp8.family import FAMILY as NM_DECODE_FP8
from .families.nm_simt.family import MAX_GROUP
from .families.sptc24_fp8_sm90.family import FAMILY as SPTC24_FP8_SM90
from .families.vnm_fp8_sm90.family import FAMILY as VNM_FP8_SM90
from .formats import NMWeight, Sparse24Weight, VNMWeight, weight_class
from .formats.fp8 import FP8_WEIGHTS, NMFP8Weight, Sparse24FP8Weight, VNMFP8Weight
from .patterns import Pattern

WEIGHTS = (Sparse24Weight, VNMWeight, NMWeight)
# weight class -> pattern kind
KINDS: dict[type, str] = {Sparse24Weight: "24", Sparse24FP8Weight: "24", VNMWeight: "vnm", NMWeight: "nm",
                          VNMFP8Weight: "vnm", NMFP8Weight: "nm"}
FP8_DECODE = {Sparse24FP8Weight: DECODE24_FP8.name, NMFP8Weight: NM_DECODE_FP8.name, VNMFP8Weight: NM_DECODE_FP8.name}
# the FP8 GEMMs (Sparse Tensor Cores) of FP8 weights above the one-token decode path
FP8_GEMM = {Sparse24FP8Weight: SPTC24_FP8_SM90.name, VNMFP8Weight: VNM_FP8_SM90.name}
# what an FP8 N:M or V:N:M weight runs as above the decode path unless an FP8 GEMM is forced: this 16-bit weight
# (no FP8 N:M GEMM; on the H200, vnm_sm90 on the 16-bit copy ran 1.4-2.6x faster than vnm_fp8_sm90)
FP8_TWINS: dict[type, type] = {NMFP8Weight: NMWeight, VNMFP8Weight: VNMWeight}
DECODE_MAX_M = 16  # largest m the decode families take (N:M and V:N:M weights)
# largest m at which 2:4 weights (k % 16 == 0) run on the decode path (decode24), not sptc24: on the H100 decode24 beat
# sptc24_sm90's shipped configs at m = 1 (1.0-2.2x, 8 LLaMA-like shapes) and lost at m = 2 on all but 4096² and below
DECODE24_MAX_M = 1


def fp8_decodes(m: int, family: str | None) -> bool:
    """Whether an FP8 matmul of m tokens runs an FP8 decode family (forced, or one token by default), which
    takes x as it comes; the FP8 GEMM takes e4m3 x (a 16-bit x is quantized per token first)."""
    return family in FP8_DECODE.values() or (family is None and m <= FP8_DECODE_MAX_M)


def fp8_twin(kind: type, m: int, family: str | None) -> type | None:
    """The 16-bit weight class an FP8 ``kind`` weight computes as at m tokens (an FP8 N:M or V:N:M weight above the
    decode path, unless ``family`` forces an FP8 GEMM), or None where an FP8 family runs it."""
    if fp8_decodes(m, family) or family in FP8_GEMM.values():
        return None
    return FP8_TWINS.get(kind)


def weight_kind(kind: type) -> str | None:
    """The pattern kind ('24', 'vnm', 'nm') of a weight class, or None for anything else."""
    return KINDS.get(kind)


def default_family(device: torch.device | None, kind: type = Sparse24Weight, m: int = 1,
                   dtype: torch.dtype = torch.float16, pattern: Pattern | str | None = None, vector: int = 0,
                   k: int = 0) -> str:
    """The family that runs a ``kind`` weight of ``pattern`` at ``m`` tokens of ``dtype`` on this GPU when none is
    forced (``device=None``: an sm_90 GPU, e.g. to plan work on a machine without one). ``vector``: an N:M
    weight's rows sharing positions (0: unknown). ``k``: the weight's in_features (0: unknown); a 2:4 weight takes
    the decode path only where k is known to be a multiple of 16 (read in place), else the sptc24 GEMM."""
    if kind in FP8_WEIGHTS:
        if device is not None and device_info(device).capability != (9, 0):
            raise ShapeError("FP8 weights run on sm_90 (Hopper) only; use a 16-bit weight here")
        if fp8_decodes(m, None):
            return FP8_DECODE[kind]
        if kind in FP8_TWINS:
            raise ShapeError(f"an FP8 {KINDS[kind]} weight at m = {m} runs as its 16-bit twin (matmul) unless an FP8 "
                             "GEMM is forced, not a default family")
        return FP8_GEMM[kind]
    if kind is Sparse24Weight and m <= DECODE24_MAX_M and k > 0 and k % DECODE24_K_MULTIPLE == 0:
        return decode_family(kind)
    if kind is NMWeight:
        if m > DECODE_MAX_M or dtype == torch.float32:
            return "nm_simt"
        return decode_family(kind, pattern, vector)
    if kind is VNMWeight and m <= DECODE_MAX_M:
        # the decode path's sparse tensor cores stream V:N:M faster than the GEMM tiles here
        return decode_family(kind, pattern, vector)
    major, minor = (9, 0) if device is None else device_info(device).capability
    hopper, ampere = gemm_families(kind)
    if (major, minor) == (9, 0):
        return hopper
    if major >= 8:
        return ampere  # also sm_100+/sm_120 until families for them exist
    raise ShapeError(f"Sparse Tensor Cores need compute capability >= 8.0, this GPU has {major}.{minor}")


def decode_family(kind: type, pattern: Pattern | str | None = None, vector: int = 0) -> str:
    """The decode family (m <= DECODE_MAX_M) of a ``kind`` weight: tensor cores (``nm_decode``) where a warp's 32
    rows share their positions (an N:M ``vector`` that is a multiple of 32; a V:N:M pattern with V % 32 == 0, or
    an unknown one), else CUDA cores (``nm_decode_simt``: any vector, V:N:M read as element-wise 2:M); 2:4 weights
    on CUDA cores read in place (``decode24``, k % 16 == 0)."""
    if kind is Sparse24Weight:
        return "decode24"
    if kind is VNMWeight:
        v = Pattern.parse(pattern).v if pattern is not None else None
        return "nm_decode" if v is None or v % 32 == 0 else "nm_decode_simt"
    return "nm_decode" if vector and vector % 32 == 0 else "nm_decode_simt"


def gemm_families(kind: type) -> tuple[str, str]:
    """The families that run ``kind`` weights above the decode range (m > DECODE_MAX_M): on sm_90, and on sm_80+
    (the same CUDA-core family for general N:M)."""
    if kind is NMWeight:
        return "nm_simt", "nm_simt"
    prefix = "vnm" if kind is VNMWeight else "sptc24"
    return f"{prefix}_sm90", f"{prefix}_sm80"


def unrunnable(pattern: Pattern, dtype: torch.dtype | None = None) -> str | None:
    """Why no kernel family of this version can run a ``pattern`` weight (of ``dtype``; None: any) at every m, or
    None where one can. The one rule ``prune``, ``compress``, ``SparseLinear`` and ``sparsify`` apply.

    Each m > DECODE_MAX_M family must take the weight (the decode families cover only m <= 16): its declared input
    dtypes, nm_simt's largest group (M <= MAX_GROUP), and the V:N:M GEMM tiles (one CTA's tile_m rows inside one
    V-block: V % min(tile_m) == 0)."""
    kind = weight_class(pattern)
    for name in dict.fromkeys(gemm_families(kind)):
        family = FAMILIES[name]
        if dtype is not None and _name(dtype) not in family.input_dtypes:
            what = {Sparse24Weight: "2:4", VNMWeight: "V:N:M"}.get(kind, "general N:M")
            hint = ("; fp32 runs general N:M patterns (e.g. '2:8', CUDA cores)" if kind is not NMWeight
                    and dtype == torch.float32 else "")
            casts = {"f32": "w.float()", "f16": "w.half()", "bf16": "w.bfloat16()"}
            return (f"{what} weights run on {name}, which takes the dtypes {'/'.join(family.input_dtypes)}, got "
                    f"a {dtype} weight: convert the weight first ({' or '.join(casts[d] for d in family.input_dtypes)})"
                    f"{hint}")
        if kind is NMWeight and pattern.m > MAX_GROUP:
            return (f"pattern {pattern}: M = {pattern.m} > {MAX_GROUP}: general N:M runs on {name}, which takes "
                    f"M <= {MAX_GROUP}; use a pattern with M <= {MAX_GROUP}")
        if kind is VNMWeight:
            tile = min(family.space()["tile_m"])
            if pattern.v % tile:
                return (f"pattern {pattern}: V = {pattern.v}: V:N:M runs at m > {DECODE_MAX_M} tokens on {name}, "
                        f"whose tiles of {tile} or more rows lie inside one V-block (V % {tile} == 0); use V = 64 or "
                        "128")
    return None


def _name(dtype: torch.dtype) -> str | None:
    try:
        return dtype_name(dtype)
    except KeyError:
        return None


def check_runnable(pattern: Pattern, dtype: torch.dtype | None = None) -> None:
    """Raise PatternError (the pattern) or InputError (the dtype) where :func:`unrunnable` names a rule."""
    if (why := unrunnable(pattern)) is not None:
        raise PatternError(f"no kernel family of this version runs {pattern} at every m: {why}")
    if dtype is not None and (why := unrunnable(pattern, dtype)) is not None:
        raise InputError(why)

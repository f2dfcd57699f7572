"""Which weight format a pattern takes, and which kernel family runs a weight: the one place for both."""

from __future__ import annotations

import torch

from .errors import ShapeError
from .families.launch import device_info
from .formats import Sparse24Weight
from .formats.nm import NMWeight
from .formats.vnm import VNMWeight
from .patterns import Pattern

WEIGHTS = (Sparse24Weight, VNMWeight, NMWeight)
KINDS: dict[type, str] = {Sparse24Weight: "24", VNMWeight: "vnm", NMWeight: "nm"}  # weight class -> pattern kind
DECODE_MAX_M = 16  # largest m the decode families take (N:M and V:N:M weights)


def weight_class(pattern: Pattern) -> type:
    """The compressed-weight class of a pattern: 2:4 -> Sparse Tensor Core format, V:N:M -> VENOM format, any
    other N:M -> the CUDA-core format."""
    if pattern.is_24:
        return Sparse24Weight
    return VNMWeight if pattern.is_vnm else NMWeight


def weight_kind(kind: type) -> str | None:
    """The pattern kind ('24', 'vnm', 'nm') of a weight class, or None for anything else."""
    return KINDS.get(kind)


def default_family(device: torch.device | None, kind: type = Sparse24Weight, m: int = 1,
                   dtype: torch.dtype = torch.float16, pattern: Pattern | str | None = None, vector: int = 0) -> str:
    """The family that runs a ``kind`` weight of ``pattern`` at ``m`` tokens of ``dtype`` on this GPU when none is
    forced (``device=None``: an sm_90 GPU, e.g. to plan work on a machine without one). ``vector``: an N:M
    weight's rows sharing positions (0: unknown)."""
    if kind is NMWeight:
        if m > DECODE_MAX_M or dtype == torch.float32:
            return "nm_simt"
        return decode_family(kind, pattern, vector)
    if kind is VNMWeight and m <= DECODE_MAX_M:
        # the decode path's sparse tensor cores stream V:N:M faster than the GEMM tiles here
        return decode_family(kind, pattern, vector)
    major, minor = (9, 0) if device is None else device_info(device).capability
    prefix = "vnm" if kind is VNMWeight else "sptc24"
    if (major, minor) == (9, 0):
        return f"{prefix}_sm90"
    if major >= 8:
        return f"{prefix}_sm80"  # also sm_100+/sm_120 until families for them exist
    raise ShapeError(f"Sparse Tensor Cores need compute capability >= 8.0, this GPU has {major}.{minor}")


def decode_family(kind: type, pattern: Pattern | str | None = None, vector: int = 0) -> str:
    """The decode family (m <= DECODE_MAX_M) of a ``kind`` weight: tensor cores (``nm_decode``) where a warp's 32
    rows share their positions (an N:M ``vector`` that is a multiple of 32; a V:N:M pattern with V % 32 == 0, or
    an unknown one), else CUDA cores (``nm_decode_simt``: any vector, V:N:M read as element-wise 2:M)."""
    if kind is VNMWeight:
        v = Pattern.parse(pattern).v if pattern is not None else None
        return "nm_decode" if v is None or v % 32 == 0 else "nm_decode_simt"
    return "nm_decode" if vector and vector % 32 == 0 else "nm_decode_simt"

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
DECODE_MAX_M = 16  # largest m the decode family takes (N:M and V:N:M weights)


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
                   dtype: torch.dtype = torch.float16) -> str:
    """The family that runs a ``kind`` weight at ``m`` tokens of ``dtype`` on this GPU when none is forced
    (``device=None``: an sm_90 GPU, e.g. to plan work on a machine without one)."""
    if kind is NMWeight:
        return "nm_decode" if m <= DECODE_MAX_M and dtype != torch.float32 else "nm_simt"
    if kind is VNMWeight and m <= DECODE_MAX_M:
        return "nm_decode"  # the decode path's sparse tensor cores stream V:N:M faster than the GEMM tiles here
    major, minor = (9, 0) if device is None else device_info(device).capability
    prefix = "vnm" if kind is VNMWeight else "sptc24"
    if (major, minor) == (9, 0):
        return f"{prefix}_sm90"
    if major >= 8:
        return f"{prefix}_sm80"  # also sm_100+/sm_120 until families for them exist
    raise ShapeError(f"Sparse Tensor Cores need compute capability >= 8.0, this GPU has {major}.{minor}")

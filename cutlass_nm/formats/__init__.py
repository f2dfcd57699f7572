"""Weight formats: prune, compress, decompress and validate, one module per packing format.

:func:`weight_class` is the one place a pattern is mapped to its format: 2:4 -> the Sparse Tensor Core format,
V:N:M -> the VENOM format, any other N:M -> the CUDA-core format.
"""

from __future__ import annotations

import torch

from ..patterns import Pattern
from .nm import NMWeight, compress_nm, mask_nm
from .sparse24 import Sparse24Weight, compress_24, mask_24, prune_24, validate_24
from .vnm import VNMWeight, compress_vnm, mask_vnm

AnyWeight = Sparse24Weight | VNMWeight | NMWeight


def weight_class(pattern: Pattern) -> type:
    """The compressed-weight class that stores ``pattern``."""
    if pattern.is_24:
        return Sparse24Weight
    return VNMWeight if pattern.is_vnm else NMWeight


def mask_for(w: torch.Tensor, pattern: Pattern, vector: int = 32) -> torch.Tensor:
    """The magnitude-pruning mask of ``w`` in ``pattern``'s format (N:M positions shared by ``vector`` rows)."""
    kind = weight_class(pattern)
    if kind is Sparse24Weight:
        return mask_24(w)
    return mask_vnm(w, pattern) if kind is VNMWeight else mask_nm(w, pattern, vector)


def compress_as(w: torch.Tensor, pattern: Pattern, *, prune: bool = False, vector: int = 32) -> AnyWeight:
    """``w`` compressed in ``pattern``'s format (pruned first with ``prune=True``)."""
    kind = weight_class(pattern)
    if kind is Sparse24Weight:
        return compress_24(w, prune=prune)
    return compress_vnm(w, pattern, prune=prune) if kind is VNMWeight else compress_nm(w, pattern, vector, prune=prune)


__all__ = ["AnyWeight", "NMWeight", "Sparse24Weight", "VNMWeight", "compress_24", "compress_as", "mask_24",
           "mask_for", "prune_24", "validate_24", "weight_class"]

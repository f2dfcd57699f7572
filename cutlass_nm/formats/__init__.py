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


def _integers(t: torch.Tensor) -> torch.Tensor:
    """``t`` as it is when it holds bytes (the stored format: no 8x copy of a layer's positions), else as int64."""
    return t if t.dtype == torch.uint8 else t.to(torch.int64)


def positions_problem(pattern: Pattern, tensors: dict[str, torch.Tensor], *, groups: bool = False) -> str | None:
    """Why a compressed weight's position tensors (``meta``, ``columns``, ``indices`` by name) are invalid, None
    when they are valid: metadata nibbles first < second (2:4 ``meta`` two a byte; V:N:M's, or 2:4 per-group
    nibbles with ``groups=True``, one a byte with nothing above it), offsets ascending and < M. A kernel fed invalid
    positions would compute a wrong product silently."""
    if "meta" in tensors:
        m = _integers(tensors["meta"])
        two = pattern.is_24 and not groups
        bad = _unordered(m & 0xF) | ((m >> 8) != 0)
        bad |= _unordered(m >> 4) if two else (m >> 4) != 0
        if bool(bad.any()):
            return "meta holds a nibble whose kept positions are not ascending (or bits above its nibbles)"
    offsets = tensors["columns"] if pattern.is_vnm else tensors.get("indices")
    if offsets is not None:
        o = _integers(offsets).reshape(offsets.shape[0], -1, 4 if pattern.is_vnm else pattern.n)
        if bool((o >= pattern.m).any() or (o[..., 1:] <= o[..., :-1]).any()):
            return f"{'columns' if pattern.is_vnm else 'indices'} hold offsets not ascending or not < M = {pattern.m}"
    return None


def _unordered(nibble: torch.Tensor) -> torch.Tensor:
    """Where a metadata nibble's first kept position (bits 0-1) is not below its second (bits 2-3)."""
    return (nibble & 3) >= ((nibble >> 2) & 3)

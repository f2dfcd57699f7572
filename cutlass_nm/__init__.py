"""cutlass_nm: N:M-sparse matrix multiplication on NVIDIA GPUs, emitted with CUTLASS.

Public surface::

    w = cutlass_nm.compress(weight, "2:4", prune=True)   # prune + compress
    y = cutlass_nm.matmul(x, w, bias)                   # y = x @ W.T + bias
"""

from __future__ import annotations

import torch

from .dispatch import matmul, set_selector
from .errors import (
    BuildError,
    ConfigError,
    CutlassNMError,
    InputError,
    LaunchError,
    PatternError,
    ShapeError,
    SparsityError,
)
from .formats import Sparse24Weight, compress_24, mask_24, validate_24
from .formats.vnm import VNMWeight, compress_vnm, mask_vnm
from .nn import SparseLinear, sparsify
from .patterns import Pattern
from .store.lookup import use_tuning_db

__version__ = "0.1.0"


def _supported(pattern: str | Pattern) -> Pattern:
    p = Pattern.parse(pattern)
    if not (p.is_24 or p.is_vnm):
        raise PatternError(f"pattern {p} has no format yet; '2:4' and V:N:M (e.g. '128:2:8') are implemented")
    return p


def prune(w: torch.Tensor, pattern: str | Pattern = "2:4") -> tuple[Sparse24Weight | VNMWeight, torch.Tensor]:
    """Magnitude-prune ``w`` to ``pattern``; return the compressed weight and the boolean mask."""
    p = _supported(pattern)
    if p.is_vnm:
        mask = mask_vnm(w, p)
        return compress_vnm(w * mask, p), mask
    mask = mask_24(w)
    return compress_24(w * mask), mask


def compress(w: torch.Tensor, pattern: str | Pattern = "2:4", *, prune: bool = False
             ) -> Sparse24Weight | VNMWeight:
    """Compress a weight that already satisfies ``pattern`` (or prune it first with ``prune=True``)."""
    p = _supported(pattern)
    return compress_vnm(w, p, prune=prune) if p.is_vnm else compress_24(w, prune=prune)


__all__ = [
    "BuildError",
    "ConfigError",
    "CutlassNMError",
    "InputError",
    "LaunchError",
    "Pattern",
    "PatternError",
    "ShapeError",
    "Sparse24Weight",
    "SparseLinear",
    "SparsityError",
    "VNMWeight",
    "compress",
    "matmul",
    "prune",
    "set_selector",
    "sparsify",
    "use_tuning_db",
    "validate_24",
]

"""cutlass_nm: N:M-sparse matrix multiplication on NVIDIA GPUs, emitted with CUTLASS.

Public surface::

    w = cutlass_nm.compress(weight, "2:4", prune=True)   # prune + compress
    y = cutlass_nm.matmul(x, w, bias)                   # y = x @ W.T + bias
"""

from __future__ import annotations

import torch

from .dispatch import matmul, set_selector, use_tuning_db
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
from .formats.nm import NMWeight, compress_nm, mask_nm
from .formats.vnm import VNMWeight, compress_vnm, mask_vnm
from .nn import SparseLinear, sparsify
from .patterns import Pattern

__version__ = "0.1.0"


AnyWeight = Sparse24Weight | VNMWeight | NMWeight


def prune(w: torch.Tensor, pattern: str | Pattern = "2:4", *, vector: int = 32) -> tuple[AnyWeight, torch.Tensor]:
    """Magnitude-prune ``w`` to ``pattern``; return the compressed weight and the boolean mask.

    '2:4' gives the Sparse Tensor Core format, 'V:2:M' the VENOM format, any other 'N:M' the CUDA-core
    format, whose kept positions are shared by ``vector`` consecutive rows (see formats/nm.py).
    """
    p = Pattern.parse(pattern)
    if p.is_24:
        mask = mask_24(w)
        return compress_24(w * mask), mask
    mask = mask_vnm(w, p) if p.is_vnm else mask_nm(w, p, vector)
    return compress(w * mask, p, vector=vector), mask


def compress(w: torch.Tensor, pattern: str | Pattern = "2:4", *, prune: bool = False, vector: int = 32) -> AnyWeight:
    """Compress a weight that already satisfies ``pattern`` (or prune it first with ``prune=True``)."""
    p = Pattern.parse(pattern)
    if p.is_24:
        return compress_24(w, prune=prune)
    return compress_vnm(w, p, prune=prune) if p.is_vnm else compress_nm(w, p, vector, prune=prune)


__all__ = [
    "BuildError",
    "ConfigError",
    "CutlassNMError",
    "InputError",
    "LaunchError",
    "NMWeight",
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

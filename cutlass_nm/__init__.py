"""cutlass_nm: N:M-sparse matrix multiplication on NVIDIA GPUs, emitted with CUTLASS.

Public surface::

    w = cutlass_nm.compress(weight, "2:4", prune=True)   # prune + compress
    y = cutlass_nm.matmul(x, w, bias)                   # y = x @ W.T + bias
    w8, _ = cutlass_nm.prune(weight, "2:4", dtype=torch.float8_e4m3fn)   # FP8 2:4 (Hopper)
"""

from __future__ import annotations

import torch

from .checkpoint import load_compressed_tensors, load_sparse, load_sparse_into, save_sparse
from .dispatch import matmul, set_selector, use_tuning_db
from .errors import (
    BuildError,
    CheckpointError,
    ConfigError,
    CutlassNMError,
    InputError,
    LaunchError,
    PatternError,
    ShapeError,
    SparsityError,
)
from .formats import AnyWeight, NMWeight, Sparse24Weight, VNMWeight, compress_as, mask_for, validate_24
from .formats.fp8 import NMFP8Weight, Sparse24FP8Weight, VNMFP8Weight, fp8_pattern_rule, quantize
from .nn import SparseLinear, precompile_model, sparsify
from .patterns import Pattern
from .routing import check_runnable

__version__ = "0.1.0"


def prune(w: torch.Tensor, pattern: str | Pattern = "2:4", *, vector: int = 32, dtype: torch.dtype | None = None
          ) -> tuple[AnyWeight, torch.Tensor]:
    """Magnitude-prune ``w`` to ``pattern``; return the compressed weight and the boolean mask.

    '2:4' gives the Sparse Tensor Core format, 'V:2:M' the VENOM format, any other 'N:M' the CUDA-core
    format, whose kept positions are shared by ``vector`` consecutive rows (see formats/nm.py).
    ``dtype=torch.float8_e4m3fn`` (w fp16, bf16 or fp32; Hopper) stores the kept values in FP8 with
    per-output-channel scales (:func:`quantize`): 2:4 runs FP8 GEMMs; N:M (N a power of two, M <= 16) and V:N:M
    (M <= 16) run FP8 at one token and as 16-bit weights above it.

    Refused, naming the rule: patterns or dtypes no kernel family of this version runs at every m
    (``routing.unrunnable``: 2:4 and V:N:M fp16/bf16 with V a multiple of 64; general N:M fp32/fp16/bf16 with
    M <= 64), weights holding NaN/Inf, and empty weights.
    """
    if dtype not in (None, torch.float8_e4m3fn):
        raise InputError(f"prune's dtype is None (keep w's) or torch.float8_e4m3fn, got {dtype}")
    # an FP8 result may come from any float weight (fp32 too): only the pattern's rule applies to it
    p = _runnable(pattern, w if dtype is None else None)
    if dtype is not None and (why := fp8_pattern_rule(p)) is not None:
        raise PatternError(why)
    mask = mask_for(w, p, vector)
    c = compress_as(w * mask, p, vector=vector)
    return (quantize(c) if dtype is not None else c), mask


def compress(w: torch.Tensor, pattern: str | Pattern = "2:4", *, prune: bool = False, vector: int = 32) -> AnyWeight:
    """Compress a weight that already satisfies ``pattern`` (or prune it first with ``prune=True``); refused as
    in :func:`prune`."""
    return compress_as(w, _runnable(pattern, w), prune=prune, vector=vector)


def _runnable(pattern: str | Pattern, w: torch.Tensor | None) -> Pattern:
    p = Pattern.parse(pattern)
    check_runnable(p, w.dtype if isinstance(w, torch.Tensor) else None)
    return p


__all__ = [
    "BuildError",
    "CheckpointError",
    "ConfigError",
    "CutlassNMError",
    "InputError",
    "LaunchError",
    "NMFP8Weight",
    "NMWeight",
    "Pattern",
    "PatternError",
    "ShapeError",
    "Sparse24FP8Weight",
    "Sparse24Weight",
    "SparseLinear",
    "SparsityError",
    "VNMFP8Weight",
    "VNMWeight",
    "compress",
    "load_compressed_tensors",
    "load_sparse",
    "load_sparse_into",
    "matmul",
    "precompile_model",
    "prune",
    "quantize",
    "save_sparse",
    "set_selector",
    "sparsify",
    "use_tuning_db",
    "validate_24",
]

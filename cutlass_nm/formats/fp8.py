"""FP8 (e4m3) weights: the kept values in float8_e4m3fn with one float32 scale per output channel,
W = values * scale[:, None], for 2:4 (``Sparse24FP8Weight``), general N:M (``NMFP8Weight``) and V:N:M
(``VNMFP8Weight``) weights; and the per-row quantization of activations and weights."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..errors import InputError, PatternError
from ..patterns import Pattern
from .nm import NMWeight
from .sparse24 import Sparse24Weight
from .vnm import VNMWeight
from .weight import check_finite

E4M3 = torch.float8_e4m3fn
E4M3_MAX = float(torch.finfo(E4M3).max)  # 448
MIN_SCALE = 1e-12  # an all-zero row keeps a finite, nonzero scale
FP8_KEEPS = (1, 2, 4, 8, 16)  # an FP8 N:M weight's N: a power of two (the decode path streams whole groups)
FP8_MAX_GROUP = 16  # and its M: a position is one nibble


def quantize_rows(t: torch.Tensor, *, check: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): ``t`` (rows x cols) as e4m3 with one float32 scale per row, t ≈ q * scale[:, None]; each row's
    largest magnitude maps to 448. ``check``: refuse non-finite values (weights; activations skip it, a host sync,
    and carry NaN/Inf into the output as a dense matmul would)."""
    if t.dim() != 2 or not t.is_floating_point():
        raise InputError(f"quantize_rows takes a 2-D float tensor, got {t.dtype} of shape {tuple(t.shape)}")
    if check:
        check_finite(t)
    scale = (t.abs().amax(dim=1).float() / E4M3_MAX).clamp_min(MIN_SCALE)
    q = (t.float() / scale[:, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q, scale


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """q * scale[:, None] in float32: the operand an e4m3 tensor with per-row scales stands for."""
    return q.float() * scale[:, None]


class _Scaled:
    """What an FP8 weight adds to its format: e4m3 ``values`` with ``scale`` (rows,) float32 (a field of each
    class), W = values * scale[:, None]; only families that declare FP8 weights run them."""

    values: torch.Tensor
    shape: tuple[int, int]
    scale: torch.Tensor | None
    fp8: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.values.dtype != E4M3:
            raise InputError(f"an FP8 weight's values are {E4M3}, got {self.values.dtype}")
        rows = self.shape[0]
        if not isinstance(self.scale, torch.Tensor) or self.scale.dtype != torch.float32 or \
                tuple(self.scale.shape) != (rows,):
            raise InputError(f"an FP8 weight needs a float32 scale of shape ({rows},)")
        if (check_format := getattr(super(), "__post_init__", None)) is not None:
            check_format()

    def kept_values(self) -> torch.Tensor:
        """The kept values dequantized, float32 (``to_dense`` is therefore float32)."""
        return dequantize_rows(self.values, self.scale)


@dataclass(eq=False)
class Sparse24FP8Weight(_Scaled, Sparse24Weight):
    """A 2:4 weight whose kept values are e4m3 (``values``: rows x k/2) with ``scale`` (rows,) float32:
    W = values * scale[:, None]. ``meta`` is the 2:4 metadata, as for ``Sparse24Weight``."""

    scale: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> Sparse24FP8Weight:
        """Copy to another device (cached kernel layouts are rebuilt there on first use)."""
        return Sparse24FP8Weight(self.values.to(device), self.meta.to(device), self.shape,
                                 scale=self.scale.to(device))


def read_as(pattern: Pattern) -> tuple[int, int]:
    """(N, M) of the element-wise N:M an FP8 decode kernel reads a ``pattern`` weight as (V:N:M: 2:M)."""
    return (2, pattern.m) if pattern.is_vnm else (pattern.n, pattern.m)


def fp8_pattern_rule(pattern: Pattern) -> str | None:
    """Why ``pattern`` has no FP8 weight format here, or None (2:4; N:M and V:N:M read as N:M, N a power of two,
    M <= 16)."""
    n, m = read_as(pattern)
    if not pattern.is_24 and (n not in FP8_KEEPS or m > FP8_MAX_GROUP):
        return (f"FP8 N:M weights take N a power of two {FP8_KEEPS} and M <= {FP8_MAX_GROUP} (V:N:M: M <= "
                f"{FP8_MAX_GROUP}), got {pattern}; keep this pattern in 16 bits (dtype=None)")
    return None


@dataclass(eq=False)
class NMFP8Weight(_Scaled, NMWeight):
    """A general N:M weight whose kept values are e4m3 with ``scale`` (rows,) float32: W = values * scale[:, None].
    ``indices`` are the N:M weight's, shared."""

    scale: torch.Tensor | None = None

    def dequantized(self, dtype: torch.dtype) -> NMWeight:
        """The same weight with its values in ``dtype`` (a 16-bit weight the 16-bit families run)."""
        return NMWeight(self.kept_values().to(dtype), self.indices, self.shape, self.pattern, self.vector)

    def to(self, device: torch.device | str) -> NMFP8Weight:
        return NMFP8Weight(self.values.to(device), self.indices.to(device), self.shape, self.pattern, self.vector,
                           scale=self.scale.to(device))


@dataclass(eq=False)
class VNMFP8Weight(_Scaled, VNMWeight):
    """A V:N:M weight whose kept values are e4m3 with ``scale`` (rows,) float32: W = values * scale[:, None].
    ``columns`` and ``meta`` are the V:N:M weight's, shared."""

    scale: torch.Tensor | None = None

    def dequantized(self, dtype: torch.dtype) -> VNMWeight:
        """The same weight with its values in ``dtype`` (a 16-bit weight the 16-bit families run)."""
        return VNMWeight(self.kept_values().to(dtype), self.columns, self.meta, self.shape, self.pattern)

    def to(self, device: torch.device | str) -> VNMFP8Weight:
        return VNMFP8Weight(self.values.to(device), self.columns.to(device), self.meta.to(device), self.shape,
                            self.pattern, scale=self.scale.to(device))


FP8_WEIGHTS = (Sparse24FP8Weight, NMFP8Weight, VNMFP8Weight)


def quantize(w: Sparse24Weight | NMWeight | VNMWeight) -> Sparse24FP8Weight | NMFP8Weight | VNMFP8Weight:
    """A compressed weight's kept values in e4m3 with per-output-channel scales (its positions are shared, not
    copied)."""
    if isinstance(w, FP8_WEIGHTS):
        raise InputError("the weight is already FP8")
    if not isinstance(w, Sparse24Weight | NMWeight | VNMWeight):
        raise InputError(f"quantize takes a compressed weight (cutlass_nm.prune(w, pattern)), got {type(w).__name__}")
    if (why := fp8_pattern_rule(w.pattern)) is not None:
        raise PatternError(why)
    q, scale = quantize_rows(w.values)
    if isinstance(w, NMWeight):
        return NMFP8Weight(q, w.indices, w.shape, w.pattern, w.vector, scale=scale)
    if isinstance(w, VNMWeight):
        return VNMFP8Weight(q, w.columns, w.meta, w.shape, w.pattern, scale=scale)
    return Sparse24FP8Weight(q, w.meta, w.shape, scale=scale)

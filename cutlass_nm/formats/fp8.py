"""FP8 (e4m3) 2:4 weights: the kept values in float8_e4m3fn with one float32 scale per output channel,
W = values * scale[:, None] (``Sparse24FP8Weight``), and the per-row quantization of activations and weights."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InputError
from .sparse24 import GROUP, KEEP, Sparse24Weight
from .weight import check_finite

E4M3 = torch.float8_e4m3fn
E4M3_MAX = float(torch.finfo(E4M3).max)  # 448
MIN_SCALE = 1e-12  # an all-zero row keeps a finite, nonzero scale


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


@dataclass(eq=False)
class Sparse24FP8Weight(Sparse24Weight):
    """A 2:4 weight whose kept values are e4m3 (``values``: rows x k/2) with ``scale`` (rows,) float32:
    W = values * scale[:, None]. ``meta`` is the 2:4 metadata, as for ``Sparse24Weight``."""

    scale: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.values.dtype != E4M3:
            raise InputError(f"an FP8 weight's values are {E4M3}, got {self.values.dtype}")
        rows = self.shape[0]
        if not isinstance(self.scale, torch.Tensor) or self.scale.dtype != torch.float32 or \
                tuple(self.scale.shape) != (rows,):
            raise InputError(f"an FP8 weight needs a float32 scale of shape ({rows},)")

    def to_dense(self) -> torch.Tensor:
        """The dequantized dense (pruned) weight, ``rows x k`` float32."""
        rows, k = self.shape
        out = torch.zeros(rows, k // GROUP, GROUP, dtype=torch.float32, device=self.device)
        values = dequantize_rows(self.values, self.scale)
        out.scatter_(-1, self.positions(), values.reshape(rows, k // GROUP, KEEP))
        return out.reshape(rows, k)

    def to(self, device: torch.device | str) -> Sparse24FP8Weight:
        """Copy to another device (cached kernel layouts are rebuilt there on first use)."""
        return Sparse24FP8Weight(self.values.to(device), self.meta.to(device), self.shape,
                                 scale=self.scale.to(device))


def quantize(w: Sparse24Weight) -> Sparse24FP8Weight:
    """A 2:4 weight's kept values in e4m3 with per-output-channel scales (the metadata is shared, not copied)."""
    if isinstance(w, Sparse24FP8Weight):
        raise InputError("the weight is already FP8")
    if not isinstance(w, Sparse24Weight):
        raise InputError(f"FP8 weights are 2:4 here (cutlass_nm.prune(w, '2:4') first), got {type(w).__name__}")
    q, scale = quantize_rows(w.values)
    return Sparse24FP8Weight(q, w.meta, w.shape, scale=scale)

"""FP8 (e4m3) weights: a 2:4-compressed weight whose kept values are float8_e4m3fn with one float32 scale per output
channel, W = values * scale[:, None]; and the per-token (or per-tensor) quantization of activations."""

from __future__ import annotations

import dataclasses

import torch

from ..errors import InputError
from .sparse24 import Sparse24Weight
from .weight import check_finite

E4M3 = torch.float8_e4m3fn
E4M3_MAX = float(torch.finfo(E4M3).max)  # 448
MIN_SCALE = 1e-12  # an all-zero row keeps a finite, nonzero scale


def quantize_rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): ``t`` (rows x cols) as e4m3 with one float32 scale per row, t ≈ q * scale[:, None]; each row's
    largest magnitude maps to 448."""
    if t.dim() != 2 or not t.is_floating_point():
        raise InputError(f"quantize_rows takes a 2-D float tensor, got {t.dtype} of shape {tuple(t.shape)}")
    check_finite(t)
    amax = t.abs().amax(dim=1).float()
    scale = (amax / E4M3_MAX).clamp_min(MIN_SCALE)
    q = (t.float() / scale[:, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q, scale


def quantize_weight(w: Sparse24Weight) -> Sparse24Weight:
    """A 2:4 weight's kept values in e4m3 with per-output-channel scales (its metadata is shared, not copied)."""
    if not isinstance(w, Sparse24Weight):
        raise InputError(f"FP8 weights are 2:4 (Sparse24Weight) here, got {type(w).__name__}")
    if w.scale is not None:
        raise InputError("the weight is already FP8 (it has a scale)")
    q, scale = quantize_rows(w.values)
    return dataclasses.replace(w, values=q, scale=scale, _layouts={})


def dequantize_weight(w: Sparse24Weight) -> Sparse24Weight:
    """The FP8 weight's values back in float32 (values * scale): the operand an fp32 reference multiplies by."""
    if w.scale is None:
        raise InputError("the weight is not FP8 (it has no scale)")
    return dataclasses.replace(w, values=w.values.float() * w.scale[:, None], scale=None, _layouts={})

"""What every compressed weight format shares: its logical shape, dtype and device, and a cache of the
kernel-specific layouts derived from it (built once per weight, before any CUDA-graph capture)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..errors import InputError, ShapeError


class CompressedWeight:
    """Mixin for the format dataclasses; they provide ``values`` and ``shape`` (rows x k)."""

    values: torch.Tensor
    shape: tuple[int, int]

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def out_features(self) -> int:
        return self.shape[0]

    @property
    def in_features(self) -> int:
        return self.shape[1]

    def __getstate__(self) -> dict:
        """Pickled and deep-copied without ``matmul``'s memo of its calls (it holds loaded kernels)."""
        state = self.__dict__.copy()
        state.pop("_calls", None)
        return state

    def has_layout(self, key: tuple) -> bool:
        """Whether the kernel layout ``key`` is already built (``layout`` would not write it now)."""
        return key in self.__dict__.get("_layouts", {})

    def layout(self, key: tuple, build: Callable[[Any], Any]) -> Any:
        """The kernel layout ``key`` of this weight, built once by ``build(self)`` and cached on it."""
        cache = self.__dict__.setdefault("_layouts", {})
        if key not in cache:
            cache[key] = build(self)
        return cache[key]


def check_not_empty(w: torch.Tensor) -> None:
    """Refuse a weight with no rows or no columns (nothing to prune, and no kernel takes n = 0 or k = 0)."""
    if w.shape[0] < 1 or w.shape[1] < 1:
        raise ShapeError(f"a weight needs out_features >= 1 and in_features >= 1, got shape {tuple(w.shape)}; "
                         "drop the empty layer instead of compressing it")


def check_finite(w: torch.Tensor) -> None:
    """Refuse a weight holding NaN or Inf: magnitude pruning cannot rank them and a kernel would spread them to
    every output they touch. The message gives the count and the first position (row, column)."""
    bad = ~torch.isfinite(w)
    if bool(bad.any()):
        row, col = (int(i) for i in torch.nonzero(bad)[0])
        raise InputError(f"the weight holds {int(bad.sum())} non-finite value(s) (NaN or Inf), the first at row "
                         f"{row}, column {col} ({float(w[row, col])}); fix the weight, or zero them first "
                         "(torch.nan_to_num(w, nan=0.0, posinf=0.0, neginf=0.0)) if that is what you mean")

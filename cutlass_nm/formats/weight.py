"""What every compressed weight format shares: its logical shape, dtype and device, and a cache of the
kernel-specific layouts derived from it (built once per weight, before any CUDA-graph capture)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


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

    def has_layout(self, key: tuple) -> bool:
        """Whether the kernel layout ``key`` is already built (``layout`` would not write it now)."""
        return key in self.__dict__.get("_layouts", {})

    def layout(self, key: tuple, build: Callable[[Any], Any]) -> Any:
        """The kernel layout ``key`` of this weight, built once by ``build(self)`` and cached on it."""
        cache = self.__dict__.setdefault("_layouts", {})
        if key not in cache:
            cache[key] = build(self)
        return cache[key]

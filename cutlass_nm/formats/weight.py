"""What every compressed weight format shares: its logical shape, dtype and device, and a cache of the
kernel-specific layouts derived from it (built once per weight, before any CUDA-graph capture)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch

from ..errors import InputError, ShapeError


class Layouts(dict):
    """A weight's kernel layouts by key, with the function that built each (``refresh_layouts`` reruns them)."""

    def __init__(self) -> None:
        super().__init__()
        self.builders: dict[tuple, Callable[[Any], Any]] = {}


class RememberedCalls:
    """The epoch of the calls ``matmul`` remembers on weights (their launches hold layout addresses): bumped when a
    selector changes or cached layouts are rebuilt or dropped, so every call remembered before resolves again."""

    epoch = 0
    state: ClassVar[dict[str, int]] = {"epoch": 0}  # the epoch in a dict: what a C++ call's guard watches

    @classmethod
    def forget(cls) -> None:
        cls.epoch += 1
        cls.state["epoch"] = cls.epoch


def refresh_layouts(w: CompressedWeight) -> None:
    """Rebuild the cached kernel layouts of ``w`` from its tensors as they are now, into the layouts' own tensors:
    after a weight changed in place (``load_state_dict``, a checkpoint loaded into a module that already ran), its
    layouts match it again and keep their addresses (launch plans and captured CUDA graphs point at them)."""
    cache = w.__dict__.get("_layouts")
    RememberedCalls.forget()
    for key in list(cache or ()):
        build = getattr(cache, "builders", {}).get(key)
        if build is None:  # not rebuildable: dropped, built again on next use
            del cache[key]
            continue
        fresh = build(w)
        if not _copy_into(cache[key], fresh):
            cache[key] = fresh


def _copy_into(old: Any, new: Any) -> bool:
    """Copy layout ``new`` into ``old`` where they have the same structure, shapes and dtypes (True), else False."""
    if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor):
        if (old.shape, old.dtype, old.device) != (new.shape, new.dtype, new.device):
            return False
        if old.data_ptr() != new.data_ptr():  # an alias of the weight itself is current already
            old.copy_(new)
        return True
    if isinstance(old, tuple | list) and isinstance(new, tuple | list) and len(old) == len(new):
        return all(_copy_into(a, b) for a, b in zip(old, new, strict=True))
    return type(old) is type(new) and old == new


class CompressedWeight:
    """Mixin for the format dataclasses; they provide ``values`` and ``shape`` (rows x k)."""

    values: torch.Tensor
    shape: tuple[int, int]
    fp8: ClassVar[bool] = False  # e4m3 values with scales: only families that declare an FP8 class run it

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    def kept_values(self) -> torch.Tensor:
        """The kept values as the numbers they stand for (an FP8 weight's dequantized to float32)."""
        return self.values

    @property
    def out_features(self) -> int:
        return self.shape[0]

    @property
    def in_features(self) -> int:
        return self.shape[1]

    def __getstate__(self) -> dict:
        """Pickled and deep-copied without ``matmul``'s memo of its calls (it holds loaded kernels) and with its
        layouts but not their builders (functions of loaded kernels)."""
        state = self.__dict__.copy()
        state.pop("_calls", None)
        if "_layouts" in state:
            state["_layouts"] = dict(state["_layouts"])
        return state

    def has_layout(self, key: tuple) -> bool:
        """Whether the kernel layout ``key`` is already built (``layout`` would not write it now)."""
        return key in self.__dict__.get("_layouts", {})

    def layout(self, key: tuple, build: Callable[[Any], Any]) -> Any:
        """The kernel layout ``key`` of this weight, built once by ``build(self)`` and cached on it."""
        cache = self.__dict__.setdefault("_layouts", Layouts())
        if key not in cache:
            cache[key] = build(self)
            if isinstance(cache, Layouts):
                cache.builders[key] = build
        return cache[key]


def kernel_alias(t: torch.Tensor, alignment: int, dense: bool) -> torch.Tensor:
    """``t`` as a kernel reads it in place: an alias of its storage (not the tensor object, which a cached layout must
    not hold: it may key the cache) where ``dense`` (its strides are ones the kernel reads) and its start and row
    pitch are ``alignment``-byte aligned, else a fresh contiguous copy."""
    if dense and t.data_ptr() % alignment == 0 and t.stride(0) * t.element_size() % alignment == 0:
        return t.detach()
    return torch.empty_like(t, memory_format=torch.contiguous_format).copy_(t)


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

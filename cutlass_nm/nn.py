"""Modules: ``SparseLinear`` (an ``nn.Linear`` with a 2:4-compressed weight) and ``sparsify(model)``."""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable

import torch
from torch import nn

from .errors import PatternError
from .formats import compress_24
from .ops import sparse24_linear, weight_view
from .patterns import Pattern

log = logging.getLogger("cutlass_nm.nn")


class SparseLinear(nn.Module):
    """``y = x Wᵀ + b`` with W stored 2:4-compressed: buffers ``values`` (out x in/2) and ``meta``
    (out x in/4, uint8). No dense copy is kept; ``state_dict`` holds the compressed tensors."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, pattern: str | Pattern = "2:4",
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.pattern = Pattern.parse(pattern)
        if not self.pattern.is_24:
            raise PatternError(f"SparseLinear supports '2:4' so far, got {self.pattern}")
        if in_features % 4:
            raise PatternError(f"2:4 needs in_features % 4 == 0, got {in_features}")
        self.in_features, self.out_features = in_features, out_features
        dtype = dtype or torch.get_default_dtype()
        self.register_buffer("values", torch.zeros(out_features, in_features // 2, device=device, dtype=dtype))
        self.register_buffer("meta", torch.full((out_features, in_features // 4), 0x4, device=device,
                                                dtype=torch.uint8))
        self.bias = nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype)) if bias else None

    @classmethod
    def from_linear(cls, linear: nn.Linear, pattern: str | Pattern = "2:4", *, prune: bool = True) -> SparseLinear:
        """Compress ``linear``'s weight (magnitude-pruned to the pattern unless ``prune=False``)."""
        w = linear.weight.detach()
        mod = cls(linear.in_features, linear.out_features, linear.bias is not None, pattern, w.device, w.dtype)
        c = compress_24(w, prune=prune)
        mod.values.copy_(c.values)
        mod.meta.copy_(c.meta)
        if linear.bias is not None:
            mod.bias.data.copy_(linear.bias.detach())
        return mod

    def weight_dense(self) -> torch.Tensor:
        """The (pruned) dense weight, decompressed on demand."""
        return weight_view(self.values, self.meta).to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sparse24_linear(x, self.values, self.meta, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, " \
               f"pattern={self.pattern}"


def sparsify(model: nn.Module, pattern: str | Pattern = "2:4", include: Iterable[str] | None = None,
             exclude: Iterable[str] | None = None) -> nn.Module:
    """Replace ``nn.Linear`` layers in place by ``SparseLinear`` (magnitude-pruned).

    ``include``/``exclude`` are fnmatch patterns over qualified module names (e.g. ``"*.mlp.*"``).
    Layers whose shapes the kernels cannot take (in_features % 16, out_features % 8) are skipped with a
    log line; the returned model is the same object.
    """
    include, exclude = list(include or ["*"]), list(exclude or [])
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            qualified = f"{name}.{child_name}" if name else child_name
            if type(child) is not nn.Linear:
                continue
            if not any(fnmatch.fnmatch(qualified, p) for p in include) or any(
                    fnmatch.fnmatch(qualified, p) for p in exclude):
                continue
            if child.in_features % 16 or child.out_features % 8:
                log.info("sparsify: skipping %s (%d -> %d): needs in %% 16 == 0 and out %% 8 == 0", qualified,
                         child.in_features, child.out_features)
                continue
            setattr(module, child_name, SparseLinear.from_linear(child, pattern))
    return model

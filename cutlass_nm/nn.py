"""Modules: ``SparseLinear`` (an ``nn.Linear`` with a 2:4- or V:N:M-compressed weight) and ``sparsify(model)``."""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable

import torch
from torch import nn

from .errors import PatternError
from .formats import compress_24
from .formats.vnm import compress_vnm
from .ops import sparse24_linear, vnm_linear, vnm_view, weight_view
from .patterns import Pattern

log = logging.getLogger("cutlass_nm.nn")


class SparseLinear(nn.Module):
    """``y = x Wᵀ + b`` with W stored compressed; no dense copy is kept, ``state_dict`` holds the compressed
    buffers. 2:4: ``values`` (out x in/2) and ``meta`` (out x in/4, uint8). V:N:M (``"128:2:8"``): ``values``
    (out x 2G), ``columns`` (ceil(out/V) x G x 4, uint8) and ``meta`` (out x G, uint8), G = ceil(in/M)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, pattern: str | Pattern = "2:4",
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.pattern = Pattern.parse(pattern)
        if not (self.pattern.is_24 or self.pattern.is_vnm):
            raise PatternError(f"SparseLinear runs '2:4' and V:N:M patterns such as '128:2:8', got {self.pattern}")
        if self.pattern.is_24 and in_features % 4:
            raise PatternError(f"2:4 needs in_features % 4 == 0, got {in_features}")
        self.in_features, self.out_features = in_features, out_features
        dtype = dtype or torch.get_default_dtype()
        if self.pattern.is_24:
            groups, kept = in_features // 4, in_features // 2
        else:
            groups = -(-in_features // self.pattern.m)
            kept = 2 * groups
            blocks = -(-out_features // self.pattern.v)
            cols = torch.arange(4, device=device, dtype=torch.uint8).expand(blocks, groups, 4).contiguous()
            self.register_buffer("columns", cols)
        self.register_buffer("values", torch.zeros(out_features, kept, device=device, dtype=dtype))
        self.register_buffer("meta", torch.full((out_features, groups), 0x4, device=device, dtype=torch.uint8))
        self.bias = nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype)) if bias else None

    @classmethod
    def from_linear(cls, linear: nn.Linear, pattern: str | Pattern = "2:4", *, prune: bool = True) -> SparseLinear:
        """Compress ``linear``'s weight (magnitude-pruned to the pattern unless ``prune=False``)."""
        w = linear.weight.detach()
        mod = cls(linear.in_features, linear.out_features, linear.bias is not None, pattern, w.device, w.dtype)
        if mod.pattern.is_24:
            c = compress_24(w, prune=prune)
        else:
            c = compress_vnm(w, mod.pattern, prune=prune)
            mod.columns.copy_(c.columns)
        mod.values.copy_(c.values)
        mod.meta.copy_(c.meta)
        if linear.bias is not None:
            mod.bias.data.copy_(linear.bias.detach())
        return mod

    def compressed(self):
        """The weight as a compressed-weight view over this module's buffers (shares their storage)."""
        if self.pattern.is_24:
            return weight_view(self.values, self.meta)
        return vnm_view(self.values, self.columns, self.meta, self.pattern.v, self.pattern.m, self.in_features)

    def weight_dense(self) -> torch.Tensor:
        """The (pruned) dense weight, decompressed on demand."""
        return self.compressed().to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pattern.is_24:
            return sparse24_linear(x, self.values, self.meta, self.bias)
        p = self.pattern
        return vnm_linear(x, self.values, self.columns, self.meta, p.v, p.m, self.in_features, self.bias)

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

"""Modules: ``SparseLinear`` (an ``nn.Linear`` with a 2:4- or V:N:M-compressed weight), ``SparseGatedMLP`` (a
SwiGLU MLP whose gate and up are pruned together and run as one kernel), ``sparsify`` and ``sparsify_gated_mlps``."""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable

import torch
from torch import nn

from .errors import PatternError
from .formats import compress_24
from .formats.glu import PAIR_V, fuse_glu, split_glu
from .formats.vnm import compress_vnm
from .ops import sparse24_linear, vnm_gated_mlp, vnm_linear, vnm_view, weight_view
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


class SparseGatedMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))`` (the LLaMA / Mistral / Qwen MLP, no biases) with V:N:M weights: gate and up
    pruned together into one ``256:2:M`` weight (buffers ``gate_up_values``, ``gate_up_columns``, ``gate_up_meta``;
    each of gate and up on its own is ``128:2:M``), ``down_proj`` a ``SparseLinear``. The forward is the custom op
    ``torch.ops.cutlass_nm.vnm_gated_mlp`` (one fused gate/up kernel on Hopper). Inference only."""

    def __init__(self, in_features: int, hidden: int, pattern: str | Pattern = "128:2:8",
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.pattern = Pattern.parse(pattern)
        if self.pattern.v != PAIR_V or hidden % PAIR_V:
            raise PatternError(f"SparseGatedMLP takes {PAIR_V}:2:M patterns and hidden % {PAIR_V} == 0, got "
                               f"{self.pattern} and hidden = {hidden}")
        self.in_features, self.hidden = in_features, hidden
        fused = SparseLinear(in_features, 2 * hidden, False, Pattern(2, self.pattern.m, 2 * PAIR_V), device, dtype)
        for name in ("values", "columns", "meta"):
            self.register_buffer(f"gate_up_{name}", getattr(fused, name))
        self.down_proj = SparseLinear(hidden, in_features, False, self.pattern, device, dtype)

    @classmethod
    def from_linears(cls, gate: nn.Linear, up: nn.Linear, down: nn.Linear,
                     pattern: str | Pattern = "128:2:8") -> SparseGatedMLP:
        """Prune gate and up together and down on its own (magnitude), and compress them."""
        if any(lin.bias is not None for lin in (gate, up, down)):
            raise PatternError("SparseGatedMLP takes bias-free gate, up and down projections")
        w = gate.weight.detach()
        mod = cls(gate.in_features, gate.out_features, pattern, w.device, w.dtype)
        fused = fuse_glu(w, up.weight.detach(), mod.pattern)
        mod.gate_up_values.copy_(fused.values)
        mod.gate_up_columns.copy_(fused.columns)
        mod.gate_up_meta.copy_(fused.meta)
        mod.down_proj = SparseLinear.from_linear(down, mod.pattern)
        return mod

    def gate_up(self):
        """The fused gate/up weight as a compressed-weight view over this module's buffers."""
        return vnm_view(self.gate_up_values, self.gate_up_columns, self.gate_up_meta, 2 * PAIR_V, self.pattern.m,
                        self.in_features)

    def dense_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The pruned dense (gate, up, down) weights, decompressed on demand."""
        return (*split_glu(self.gate_up()), self.down_proj.weight_dense())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.down_proj
        return vnm_gated_mlp(x, self.gate_up_values, self.gate_up_columns, self.gate_up_meta, d.values, d.columns,
                             d.meta, self.pattern.m, self.pattern.m, self.in_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, hidden={self.hidden}, pattern={self.pattern}"


def sparsify_gated_mlps(model: nn.Module, pattern: str | Pattern = "128:2:8", include: Iterable[str] = ("*mlp",),
                        names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> nn.Module:
    """Replace, in place, every module matching ``include`` (fnmatch over qualified names) whose children
    ``names`` (gate, up, down) are bias-free ``nn.Linear`` layers by a ``SparseGatedMLP``. Its forward is
    ``down(silu(gate(x)) * up(x))``: use it for models whose MLP computes exactly that (LLaMA, Mistral, Qwen).
    Other ``nn.Linear`` layers are left to ``sparsify``. Returns the same model."""
    include = list(include)
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            qualified = f"{name}.{child_name}" if name else child_name
            if not any(fnmatch.fnmatch(qualified, p) for p in include):
                continue
            parts = [getattr(child, n, None) for n in names]
            if not all(type(p) is nn.Linear and p.bias is None for p in parts):
                continue
            if parts[0].out_features % PAIR_V:
                log.info("sparsify_gated_mlps: skipping %s: hidden %d is not a multiple of %d", qualified,
                         parts[0].out_features, PAIR_V)
                continue
            setattr(module, child_name, SparseGatedMLP.from_linears(*parts, pattern))
    return model

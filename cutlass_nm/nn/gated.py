"""SwiGLU MLPs whose gate and up run as one kernel: ``SparseGatedMLP`` (V:N:M, pruned together) and
``Sparse24GatedMLP`` (2:4, stacked); ``sparsify_gated_mlps`` and ``fuse_sparse_gated_mlps``."""

from __future__ import annotations

import fnmatch
import functools
import logging
from collections.abc import Callable, Iterable

import torch
from torch import nn

from ..errors import InputError, PatternError
from ..formats import meta_sm90, positions_problem
from ..formats.glu import PAIR_V, fuse_glu, split_glu
from ..formats.weight import refresh_layouts
from ..gated_mlp import gated_mlp
from ..ops import (
    vnm_gated_mlp,
    vnm_view,
)
from ..patterns import Pattern
from ..routing import check_runnable
from .linear import SparseLinear, cached_view, direct_call, drop_cached
from .stacked import StackedSparseLinear

log = logging.getLogger("cutlass_nm.nn")


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
        check_runnable(Pattern.parse(pattern), w.dtype)
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

    def _apply(self, fn: Callable, recurse: bool = True) -> SparseGatedMLP:
        """``nn.Module``'s, after dropping the cached gate/up view (``drop_cached``): the old tensors are freed."""
        drop_cached(self)
        return super()._apply(fn, recurse)

    def _gate_up_view(self):
        """``gate_up()``, kept while the gate/up buffers are the same tensors."""
        return cached_view(self, tuple(self._buffers.values()), self.gate_up)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list, unexpected_keys: list, error_msgs: list) -> None:
        """``nn.Module``'s, then the gate/up kernel layouts already built are rebuilt in place (``down_proj``, a
        SparseLinear, does its own). Gate/up positions that break the pattern are refused, as SparseLinear refuses
        them."""
        incoming = {name: t for name in ("meta", "columns")
                    if isinstance(t := state_dict.get(f"{prefix}gate_up_{name}"), torch.Tensor)
                    and t.shape == self._buffers[f"gate_up_{name}"].shape}
        if (why := positions_problem(self.pattern, incoming)) is not None:
            error_msgs.append(f"{prefix or 'the module'}: {why} (the fused gate/up weight's positions)")
            return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        refresh_layouts(self._gate_up_view())

    def dense_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The pruned dense (gate, up, down) weights, decompressed on demand."""
        return (*split_glu(self.gate_up()), self.down_proj.weight_dense())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.down_proj
        if direct_call(x):
            return gated_mlp(x if x.is_contiguous() else x.contiguous(), self._gate_up_view(), d._view())
        return vnm_gated_mlp(x, self.gate_up_values, self.gate_up_columns, self.gate_up_meta, d.values, d.columns,
                             d.meta, self.pattern.m, self.pattern.m, self.in_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, hidden={self.hidden}, pattern={self.pattern}"


GATED_NAMES = ("gate_proj", "up_proj", "down_proj")  # a SwiGLU MLP's projections (LLaMA, Mistral, Qwen)
def has_silu(mlp: nn.Module) -> bool:
    """Whether ``mlp``'s activation module (``act_fn``, as transformers names it) is SiLU."""
    return type(getattr(mlp, "act_fn", None)).__name__ in ("SiLU", "SiLUActivation")


class Sparse24GatedMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))`` (the LLaMA / Mistral / Qwen MLP, no biases) with 2:4 weights: gate and up
    stacked into one ``StackedSparseLinear`` ``gate_up`` (gate's rows first), one kernel where there were two up to
    ``FUSED_ROWS`` rows of x; ``down_proj`` a ``SparseLinear``. Inference only."""

    def __init__(self, gate_up: StackedSparseLinear, down_proj: SparseLinear) -> None:
        super().__init__()
        if not isinstance(gate_up, StackedSparseLinear) or gate_up.sizes != (down_proj.in_features,) * 2:
            raise PatternError(f"Sparse24GatedMLP takes a StackedSparseLinear gate_up of 2 x {down_proj.in_features} "
                               f"rows, got {type(gate_up).__name__} with {gate_up.out_features}")
        self.gate_up, self.down_proj = gate_up, down_proj
        self.hidden = down_proj.in_features

    @classmethod
    def from_linears(cls, gate: nn.Linear, up: nn.Linear, down: nn.Linear, *, fp8: bool = False
                     ) -> Sparse24GatedMLP:
        """Prune gate, up and down to 2:4 (magnitude; ``fp8``: as ``SparseLinear.from_linear``'s) and stack gate
        and up (:meth:`from_sparse`: both prune and FP8 scales go row by row, so stacking after is the same)."""
        if any(lin.bias is not None for lin in (gate, up, down)) or gate.weight.shape != up.weight.shape:
            raise PatternError("Sparse24GatedMLP takes bias-free gate, up and down projections, gate and up alike")
        return cls.from_sparse(*(SparseLinear.from_linear(lin, "2:4", fp8=fp8) for lin in (gate, up, down)))

    @classmethod
    def from_sparse(cls, gate: SparseLinear, up: SparseLinear, down: SparseLinear) -> Sparse24GatedMLP:
        """Stack two bias-free 2:4 SparseLinear layers of one shape (and FP8 or not alike) as they are: their
        compressed rows, nothing pruned again."""
        if not all(isinstance(lin, SparseLinear) and lin.pattern.is_24 and lin.bias is None
                   for lin in (gate, up, down)) or (gate.in_features, gate.out_features, gate.fp8) != (
                up.in_features, up.out_features, up.fp8):
            raise PatternError("Sparse24GatedMLP.from_sparse takes bias-free 2:4 SparseLinear layers, gate and up "
                               "alike")
        return cls(StackedSparseLinear.stack([gate, up]), down)

    def dense_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The pruned dense (gate, up, down) weights, decompressed on demand."""
        gate, up = self.gate_up.weight_dense().split(self.hidden)
        return gate, up, self.down_proj.weight_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up.split(x)
        return self.down_proj(nn.functional.silu(gate) * up)


def sparsify_gated_mlps(model: nn.Module, pattern: str | Pattern = "128:2:8", include: Iterable[str] = ("*mlp",),
                        names: tuple[str, str, str] = GATED_NAMES, *, fp8: bool = False) -> nn.Module:
    """Replace, in place, every module matching ``include`` (fnmatch over qualified names) whose children
    ``names`` (gate, up, down) are bias-free ``nn.Linear`` layers by a ``SparseGatedMLP`` (``128:2:M``) or a
    ``Sparse24GatedMLP`` (``2:4``; ``fp8``: e4m3 weights). Its forward is ``down(silu(gate(x)) * up(x))``: use it
    for models whose MLP computes exactly that (LLaMA, Mistral, Qwen). Other ``nn.Linear`` layers are left to
    ``sparsify``. Returns the same model."""
    if not isinstance(model, nn.Module):
        raise InputError(f"sparsify_gated_mlps takes an nn.Module, got {type(model).__name__}")
    p = Pattern.parse(pattern)
    if not p.is_24 and p.v != PAIR_V:
        raise PatternError(f"sparsify_gated_mlps takes 2:4 or {PAIR_V}:2:M patterns, got {p}")
    include, is_24 = [include] if isinstance(include, str) else list(include), p.is_24
    fuse = (functools.partial(Sparse24GatedMLP.from_linears, fp8=fp8) if is_24
            else functools.partial(SparseGatedMLP.from_linears, pattern=pattern))
    rows = meta_sm90.ROWS_ALIGN if is_24 else PAIR_V  # hidden a multiple of this (a stack's row blocks)
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            qualified = f"{name}.{child_name}" if name else child_name
            if not any(fnmatch.fnmatch(qualified, p) for p in include):
                continue
            parts = [getattr(child, n, None) for n in names]
            if not all(type(p) is nn.Linear and p.bias is None for p in parts):
                continue
            if parts[0].out_features % rows:
                log.info("sparsify_gated_mlps: skipping %s: hidden %d is not a multiple of %d", qualified,
                         parts[0].out_features, rows)
                continue
            setattr(module, child_name, fuse(*parts))
    return model


def fuse_sparse_gated_mlps(model: nn.Module, names: tuple[str, str, str] = GATED_NAMES) -> list[str]:
    """Replace, in place, every SiLU MLP whose children ``names`` (gate, up, down) are already bias-free 2:4
    SparseLinear layers (e.g. loaded from a checkpoint) by a ``Sparse24GatedMLP`` stacking them as they are; returns
    the qualified names of the MLPs fused."""
    fused = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if not has_silu(child):
                continue
            try:  # from_sparse's rule says which MLPs stack
                mlp = Sparse24GatedMLP.from_sparse(*(getattr(child, n, None) for n in names))
            except PatternError:
                continue
            setattr(module, child_name, mlp)
            fused.append(f"{name}.{child_name}" if name else child_name)
    return fused

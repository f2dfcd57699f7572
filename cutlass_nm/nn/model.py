"""Whole-model helpers over the sparse modules: ``precompile_model`` and ``refresh_module_layouts``."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from ..dispatch import kernels_for, precompile_ids
from ..errors import InputError
from ..formats.weight import refresh_layouts
from ..gated_mlp import gated_mlp_kernels
from .gated import SparseGatedMLP
from .linear import SparseLinear
from .stacked import FUSED_ROWS, StackedSparseLinear


def precompile_model(model: nn.Module, tokens: Iterable[int], progress: Callable | None = None) -> int:
    """Compile, in parallel, every kernel the sparse modules of ``model`` on a CUDA GPU run at each count of rows
    in ``tokens`` (batch x sequence of one forward: prefill and decode sizes alike), so that no first call compiles.
    Activations are taken in each module's dtype (FP8 modules: their bias's, else bf16). ``progress``: as
    ``cutlass_nm.kernels.precompile``'s. Returns how many kernels that is (compiled or already cached)."""
    if not isinstance(model, nn.Module):
        raise InputError(f"precompile_model takes an nn.Module, got {type(model).__name__}")
    tokens = tuple(tokens)
    if not tokens or not all(isinstance(t, int) and t >= 1 for t in tokens):
        raise InputError(f"tokens must be positive ints (rows of x a forward takes), got {tokens!r}")
    kids: dict[tuple, None] = {}
    inside = {id(mod.down_proj) for mod in model.modules() if isinstance(mod, SparseGatedMLP)}
    for mod in model.modules():
        if isinstance(mod, SparseGatedMLP) and mod.gate_up_values.is_cuda:
            gate_up, down = mod._gate_up_view(), mod.down_proj._view()
            for m in tokens:
                kids.update(dict.fromkeys(gated_mlp_kernels(m, gate_up, down, mod.gate_up_values.dtype)))
        elif isinstance(mod, SparseLinear) and mod.values.is_cuda and id(mod) not in inside:
            bias = mod.bias is not None
            dtype = (mod.bias.dtype if bias else torch.bfloat16) if mod.fp8 else mod.values.dtype
            stacked = isinstance(mod, StackedSparseLinear)  # as its split(x) runs: parts above FUSED_ROWS
            kids.update(dict.fromkeys(kernels_for([(m, w, dtype, bias) for m in tokens for w in (
                mod.parts() if stacked and m > FUSED_ROWS else (mod._view(),))])))
    precompile_ids(list(kids), progress)
    return len(kids)


def refresh_module_layouts(model: nn.Module) -> None:
    """Rebuild in place the kernel layouts of every sparse module of ``model`` (after its tensors changed in place
    other than through ``load_state_dict``, e.g. ``tensor.copy_``)."""
    for mod in model.modules():
        if isinstance(mod, SparseLinear):
            refresh_layouts(mod._view())
        elif isinstance(mod, SparseGatedMLP):
            refresh_layouts(mod._gate_up_view())
        if isinstance(mod, StackedSparseLinear):
            mod.refresh_parts()

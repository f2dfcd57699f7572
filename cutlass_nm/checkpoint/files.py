"""What both checkpoint formats share: safetensors access, tensor names, and installing weights into a model."""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import CheckpointError, PatternError
from ..formats import AnyWeight
from ..formats.fp8 import Sparse24FP8Weight
from ..nn import (
    GATED_NAMES,
    QKV_NAMES,
    STACKED_QKV,
    Sparse24GatedMLP,
    SparseLinear,
    StackedPart,
    StackedSparseLinear,
    has_silu,
    refresh_module_layouts,
    weight_tensors,
)

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float8_e4m3fn": torch.float8_e4m3fn}
HF_EXTRA = "pip install cutlass-nm[hf]"
PathLike = str | os.PathLike


def tensor_key(layer: str, buf: str) -> str:
    return f"{layer}.{buf}" if layer else buf


def safetensors_module() -> Any:
    try:
        import safetensors
        import safetensors.torch
    except ImportError:
        raise ImportError(f"cutlass_nm checkpoints need the safetensors package: {HF_EXTRA} (or pip install "
                          "safetensors)") from None
    return safetensors


def open_safetensors(path: Path, stack: ExitStack, device: str = "cpu") -> Any:
    """An open safetensors file; every error safetensors raises becomes one CheckpointError."""
    if not path.is_file():
        raise CheckpointError(f"{path}: {'a folder, not a file' if path.is_dir() else 'no such file'}")
    try:
        return stack.enter_context(safetensors_module().safe_open(str(path), framework="pt", device=device))
    except ImportError:
        raise
    except Exception as exc:  # SafetensorError (not safetensors, truncated), OSError
        raise CheckpointError(f"{path} is not a readable safetensors file (truncated or not safetensors): "
                              f"{exc}") from None


def _stack_shells(model: nn.Module, layers: Mapping[str, AnyWeight], source: str
                  ) -> tuple[dict[str, nn.Module], dict[str, SparseLinear]]:
    """(modules to set at qualified names, the empty SparseLinear each of those layers fills) for the stacked layers
    ``layers`` hold where ``model`` still has the ``nn.Linear`` layers they stack: a SwiGLU MLP's 2:4 gate/up
    (``<mlp>.gate_up``, with ``<mlp>.down_proj``; the MLP becomes a ``Sparse24GatedMLP``, SiLU checked) and an
    attention's q/k/v of any pattern (``<attn>.qkv_proj``; it gets the stack and a ``StackedPart`` per
    projection). Shapes are checked first."""
    installs: dict[str, nn.Module] = {}
    fills: dict[str, SparseLinear] = {}
    for name, w in layers.items():
        owner_name, _, leaf = name.rpartition(".")
        names = {"gate_up": GATED_NAMES[:2], STACKED_QKV: QKV_NAMES}.get(leaf)
        try:
            owner = model.get_submodule(owner_name) if names else None
        except AttributeError:
            continue  # reported as a layer the model lacks
        lins = [getattr(owner, n, None) for n in names or ()]
        if not lins or not all(type(lin) is nn.Linear for lin in lins):
            continue
        rows = sum(lin.out_features for lin in lins)
        kind = "2:4 gate/up" if leaf == "gate_up" else "q/k/v"
        if not (w.pattern.is_24 or leaf == STACKED_QKV) or w.shape != (rows, lins[0].in_features) or len({
                (lin.in_features, lin.bias is not None) for lin in lins}) != 1:
            raise CheckpointError(f"{source}: layer {name!r} is {w.pattern} {w.shape[0]}x{w.shape[1]} in the "
                                  f"checkpoint; the model's {owner_name} takes a stacked {kind} of "
                                  f"{rows}x{lins[0].in_features} (one input, biased alike)")
        try:
            stack = StackedSparseLinear(w.shape[1], [lin.out_features for lin in lins], lins[0].bias is not None,
                                        *_placement(lins[0]), pattern=w.pattern, vector=_vector(w),
                                        fp8=isinstance(w, Sparse24FP8Weight))
        except PatternError as exc:
            raise CheckpointError(f"{source}: layer {name!r}, the model's stacked {kind}: {exc}") from None
        fills[name] = stack
        if leaf == STACKED_QKV:
            installs[name] = stack
            installs.update({f"{owner_name}.{n}": StackedPart(stack, i) for i, n in enumerate(names)})
            continue
        down, down_lin = layers.get(f"{owner_name}.down_proj"), getattr(owner, GATED_NAMES[2], None)
        if down is None or type(down_lin) is not nn.Linear:
            raise CheckpointError(f"{source}: layer {name!r} is a stacked gate/up, but the checkpoint or the model "
                                  f"has no {owner_name}.down_proj to go with it")
        if not has_silu(owner):
            raise CheckpointError(f"{source}: layer {name!r} is a fused SwiGLU gate/up, but {owner_name}'s "
                                  "activation is not SiLU")
        installs[owner_name] = mlp = Sparse24GatedMLP(stack, _sparse_for(down_lin, down))
        fills[f"{owner_name}.down_proj"] = mlp.down_proj
    return installs, fills


def _placement(lin: nn.Linear) -> tuple[torch.device, torch.dtype]:
    """Where a SparseLinear that replaces ``lin`` lives: its device (the CPU for a meta one) and dtype."""
    return (lin.weight.device if lin.weight.device.type != "meta" else torch.device("cpu")), lin.weight.dtype


def _vector(w: AnyWeight) -> int:
    """The ``vector`` argument a SparseLinear holding ``w`` takes: a general N:M weight's, else the default."""
    return getattr(w, "vector", 0) or 32


def _sparse_for(lin: nn.Linear, w: AnyWeight) -> SparseLinear:
    """An empty SparseLinear that takes ``w`` in place of ``lin`` (its dtype, device and bias; ``w``'s shape,
    pattern, vector and FP8)."""
    return SparseLinear(w.shape[1], w.shape[0], lin.bias is not None, w.pattern, *_placement(lin),
                        vector=_vector(w), fp8=isinstance(w, Sparse24FP8Weight))


def _target(model: nn.Module, fills: Mapping[str, SparseLinear], name: str, w: AnyWeight,
            source: str) -> nn.Module:
    """The module layer ``name`` goes into (an ``nn.Linear`` to replace or a SparseLinear to fill; ``fills``' own
    where it has one), checked against ``w`` without changing the model."""
    try:
        mod = fills[name] if name in fills else model.get_submodule(name)
    except AttributeError:
        raise CheckpointError(f"{source}: layer {name!r} is not in the model") from None
    if not isinstance(mod, nn.Linear | SparseLinear):
        raise CheckpointError(f"{source}: layer {name!r} is a {type(mod).__name__} in the model, not an nn.Linear "
                              "or SparseLinear")
    if (mod.out_features, mod.in_features) != w.shape:
        raise CheckpointError(f"{source}: layer {name!r} is {w.shape[0]}x{w.shape[1]} (out x in) in the "
                              f"checkpoint, {mod.out_features}x{mod.in_features} in the model")
    vector, fp8 = getattr(w, "vector", 0), isinstance(w, Sparse24FP8Weight)
    if isinstance(mod, SparseLinear) and (mod.pattern, mod.vector, mod.fp8) != (w.pattern, vector, fp8):
        raise CheckpointError(f"{source}: layer {name!r} is {w.pattern} (vector {vector}, fp8 {fp8}) in the "
                              f"checkpoint, {mod.pattern} (vector {mod.vector}, fp8 {mod.fp8}) in the model")
    return mod


def install(model: nn.Module, layers: Mapping[str, AnyWeight], tensors: Mapping[str, torch.Tensor], *,
             strict: bool, source: str) -> nn.Module:
    """Put ``layers`` into ``model`` (an ``nn.Linear`` is replaced by a SparseLinear of its dtype and device, a
    SparseLinear is filled; where the checkpoint holds a stacked 2:4 gate/up or a stacked q/k/v, the model's MLP or
    attention takes the stack) and load ``tensors`` by name; returns the model (or the SparseLinear that replaced it).
    Every layer is checked before the model changes."""
    installs, fills = _stack_shells(model, layers, source)
    targets = {name: _target(model, fills, name, w, source) for name, w in layers.items()}  # all checked first
    for qualified, module in installs.items():
        parent, _, child = qualified.rpartition(".")
        setattr(model.get_submodule(parent), child, module)
    root = model
    for name, w in layers.items():
        mod = targets[name]
        if not isinstance(mod, SparseLinear):  # an nn.Linear: replaced
            mod = _sparse_for(mod, w)
            if not name:
                root = mod
            else:
                parent, _, child = name.rpartition(".")
                setattr(model.get_submodule(parent), child, mod)
        with torch.no_grad():
            for buf, t in weight_tensors(w).items():
                mod._buffers[buf].copy_(t)
    state = root.state_dict()
    unexpected = [k for k in tensors if k not in state]
    if unexpected:
        raise CheckpointError(f"{source}: {len(unexpected)} tensor(s) the model does not have, e.g. "
                              f"{unexpected[:3]}")
    for k, t in tensors.items():
        if state[k].shape != t.shape:
            raise CheckpointError(f"{source}: tensor {k!r} is {tuple(t.shape)} in the checkpoint, "
                                  f"{tuple(state[k].shape)} in the model")
    held = {tensor_key(n, b) for n, w in layers.items() for b in weight_tensors(w)}
    missing = [k for k in state if k not in tensors and k not in held]
    if strict and missing:
        raise CheckpointError(f"{source}: {len(missing)} model tensor(s) not in the checkpoint, e.g. {missing[:3]} "
                              "(pass strict=False to keep them as they are)")
    with torch.no_grad():
        for k, t in tensors.items():
            state[k].copy_(t)
    refresh_module_layouts(root)  # a module that already ran has kernel layouts of its old weights
    return root


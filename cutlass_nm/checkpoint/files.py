"""What both checkpoint formats share: safetensors access, tensor names, and installing weights into a model."""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import CheckpointError
from ..formats import AnyWeight
from ..formats.fp8 import Sparse24FP8Weight
from ..nn import GATED_NAMES, Sparse24GatedMLP, SparseLinear, has_silu, refresh_module_layouts, weight_tensors

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
        raise CheckpointError(f"{path}: no such file")
    try:
        return stack.enter_context(safetensors_module().safe_open(str(path), framework="pt", device=device))
    except ImportError:
        raise
    except Exception as exc:  # SafetensorError (not safetensors, truncated), OSError
        raise CheckpointError(f"{path} is not a readable safetensors file (truncated or not safetensors): "
                              f"{exc}") from None


def _gate_up_shells(model: nn.Module, layers: Mapping[str, AnyWeight], source: str) -> dict[str, Sparse24GatedMLP]:
    """The empty ``Sparse24GatedMLP`` each SwiGLU MLP of ``model`` becomes, by qualified name, where ``layers`` hold
    its stacked 2:4 gate/up (``<mlp>.gate_up``, with ``<mlp>.down_proj``) and the model still has its three
    ``nn.Linear`` projections (``GATED_NAMES``); the layers' shapes and the MLP's SiLU are checked first."""
    shells = {}
    for name, w in layers.items():
        mlp_name, _, leaf = name.rpartition(".")
        down = layers.get(f"{mlp_name}.down_proj")
        try:
            mlp = model.get_submodule(mlp_name)
        except AttributeError:
            continue  # reported as a layer the model lacks
        parts = [getattr(mlp, n, None) for n in GATED_NAMES]
        if leaf != "gate_up" or down is None or not all(type(p) is nn.Linear for p in parts):
            continue
        gate = parts[0]
        if not w.pattern.is_24 or w.shape != (2 * gate.out_features, gate.in_features):
            raise CheckpointError(f"{source}: layer {name!r} is {w.pattern} {w.shape[0]}x{w.shape[1]} in the "
                                  f"checkpoint; the model's MLP takes a stacked 2:4 gate/up of "
                                  f"{2 * gate.out_features}x{gate.in_features}")
        if not has_silu(mlp):
            raise CheckpointError(f"{source}: layer {name!r} is a fused SwiGLU gate/up, but {mlp_name}'s activation "
                                  "is not SiLU")
        shells[mlp_name] = Sparse24GatedMLP(_sparse_for(gate, w), _sparse_for(parts[2], down))
    return shells


def _sparse_for(lin: nn.Linear, w: AnyWeight) -> SparseLinear:
    """An empty SparseLinear that takes ``w`` in place of ``lin`` (its dtype, device and bias; ``w``'s shape,
    pattern, vector and FP8)."""
    device = lin.weight.device if lin.weight.device.type != "meta" else torch.device("cpu")
    return SparseLinear(w.shape[1], w.shape[0], lin.bias is not None, w.pattern, device, lin.weight.dtype,
                        vector=getattr(w, "vector", 0) or 32, fp8=isinstance(w, Sparse24FP8Weight))


def _target(model: nn.Module, shells: Mapping[str, Sparse24GatedMLP], name: str, w: AnyWeight,
            source: str) -> nn.Module:
    """The module layer ``name`` goes into (an ``nn.Linear`` to replace or a SparseLinear to fill; inside a
    ``shells`` MLP where it takes one), checked against ``w`` without changing the model."""
    mlp_name, _, leaf = name.rpartition(".")
    try:
        mod = getattr(shells[mlp_name], leaf) if mlp_name in shells else model.get_submodule(name)
    except (AttributeError, KeyError):
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
    SparseLinear is filled; a SwiGLU MLP whose stacked 2:4 gate/up the checkpoint holds becomes a
    ``Sparse24GatedMLP``) and load ``tensors`` by name; returns the model (or the SparseLinear that replaced it).
    Every layer is checked before the model changes."""
    shells = _gate_up_shells(model, layers, source)
    targets = {name: _target(model, shells, name, w, source) for name, w in layers.items()}  # all checked first
    for mlp_name, shell in shells.items():
        parent, _, child = mlp_name.rpartition(".")
        setattr(model.get_submodule(parent), child, shell)
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


"""Sparse only where it wins: ``sparsify`` times each distinct layer shape dense and sparse on the GPU, at the token
counts the user names, and keeps a layer sparse only where it is faster by ``min_speedup`` at every one of them.

Timing is a short on-device measurement (the decision follows this GPU and this version's kernels, including
shapes nobody tuned): CUDA-graph replays of the layer's forward over copies of its inputs and weights rotated past
L2 (``cutlass_nm.timing``), median of ``REPS``; kernels are compiled in parallel first.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field

import torch
from rich.console import Console
from torch import nn

from .build.progress import build_progress, step_progress
from .dispatch import kernels_for, precompile_ids
from .kernels import uncompiled
from .timing import copies_to_rotate, time_rotating

REPS = 30
WARMUP_MS = 25.0


@dataclass
class LayerDecision:
    """One layer's decision: ``sparse`` or ``dense``, the dense-over-sparse time ratio per token count (None:
    not measured) and how it was decided (``measured``, ``forced``, or why it could not be measured)."""

    name: str
    shape: tuple[int, int]  # (out_features, in_features)
    decision: str
    speedup: dict[int, float] = field(default_factory=dict)
    how: str = "measured"

    def row(self) -> str:
        sp = ", ".join(f"m={m}: {s:.2f}x" for m, s in self.speedup.items()) or "-"
        return f"{self.name or '<model>'}  {self.shape[0]}x{self.shape[1]}  {self.decision}  {sp}  ({self.how})"


def time_module(module: nn.Module, m: int) -> float:
    """Median ms of ``module`` (a linear layer: ``in_features``, ``out_features``) on m rows of its weight dtype on
    its device, over copies of inputs and module rotated past L2."""
    tensors = [*module.parameters(), *module.buffers()]
    dtype = next(t.dtype for t in tensors if t.is_floating_point())
    size = sum(t.numel() * t.element_size() for t in tensors)
    copies = copies_to_rotate(size + m * (module.in_features + module.out_features) * torch.finfo(dtype).bits // 8)
    mods = [module] + [copy.deepcopy(module) for _ in range(copies - 1)]
    xs = [torch.randn(m, module.in_features, device=tensors[0].device, dtype=dtype) for _ in range(copies)]
    with torch.no_grad():
        return time_rotating(lambda i: mods[i](xs[i]), copies, REPS, WARMUP_MS).p50_ms


def measure_speedups(linear: nn.Linear, sparse: nn.Module, tokens: tuple[int, ...]) -> dict[int, float]:
    """Dense time / sparse time of one layer at each token count (> 1: sparse is faster), on the layer's GPU."""
    return {m: time_module(linear, m) / time_module(sparse, m) for m in tokens}


def decide(layers: list[tuple[str, nn.Linear, nn.Module]], tokens: tuple[int, ...], min_speedup: float,
           progress: bool = True) -> list[LayerDecision]:
    """A decision per (name, dense layer, its sparse replacement), timing each distinct (shape, dtype, bias) once.
    Layers off the GPU are kept sparse, unmeasured. ``progress``: counted bars on stderr while kernels compile
    (where any is not built yet) and while the shapes are timed."""
    cuda = [(name, lin, sp) for name, lin, sp in layers if _measurable(lin)]
    problems = [(m, sp.compressed(), lin.weight.dtype, lin.bias is not None) for _, lin, sp in cuda for m in tokens
                if hasattr(sp, "compressed")]
    if problems:
        _compile(problems, progress)
    first = {}  # each distinct (shape, dtype, bias, device), timed once: its first layer
    for _, lin, sp in cuda:
        first.setdefault((lin.out_features, lin.in_features, lin.weight.dtype, lin.bias is not None,
                          lin.weight.device), (lin, sp))
    measured: dict[tuple, dict[int, float]] = {}
    with (step_progress(len(first), "sparsify: timing layer shapes") if progress and first
          else contextlib.nullcontext(lambda note: None)) as step:
        for key, (lin, sp) in first.items():
            measured[key] = measure_speedups(lin, sp, tokens)
            step(f"{key[0]}x{key[1]}: " + ", ".join(f"m={m} {s:.2f}x" for m, s in measured[key].items()))
    decisions = []
    for name, lin, _ in layers:
        shape = (lin.out_features, lin.in_features)
        if not _measurable(lin):
            decisions.append(LayerDecision(name, shape, "sparse", {}, "not measured: the layer is not on a CUDA GPU"))
            continue
        speed = measured[(*shape, lin.weight.dtype, lin.bias is not None, lin.weight.device)]
        decisions.append(LayerDecision(name, shape, "sparse" if min(speed.values()) >= min_speedup else "dense",
                                       speed))
    return decisions


def _compile(problems: list[tuple], progress: bool) -> None:
    """Compile the kernels the timing runs, in parallel, with a counted bar where any is not built yet."""
    kids = kernels_for(problems)
    if progress and uncompiled(kids):
        with build_progress(len(kids), Console(stderr=True), label="sparsify: compiling") as step:
            precompile_ids(kids, step)
    else:
        precompile_ids(kids)


def _measurable(linear: nn.Linear) -> bool:
    return linear.weight.is_cuda

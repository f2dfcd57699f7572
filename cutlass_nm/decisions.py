"""Sparse only where it wins: ``sparsify`` times each distinct layer shape dense and sparse on the GPU, at the token
counts the user names, and keeps a layer sparse only where it is faster by ``min_speedup`` at every one of them.

Timing is a short on-device measurement (the decision follows this GPU and this version's kernels, including
shapes nobody tuned): CUDA-graph replays of the layer's forward over copies of its inputs and weights rotated past
L2 (``cutlass_nm.timing``), median of ``REPS``; kernels are compiled in parallel first.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional

from .dispatch import precompile_for
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


def measure_speedups(linear: nn.Linear, sparse: nn.Module, tokens: tuple[int, ...]) -> dict[int, float]:
    """Dense time / sparse time of one layer at each token count (> 1: sparse is faster), on the layer's GPU."""
    w = linear.weight.detach()
    bias = None if linear.bias is None else linear.bias.detach()
    out: dict[int, float] = {}
    with torch.no_grad():
        for m in tokens:
            wbytes = w.numel() * w.element_size()
            copies = copies_to_rotate(wbytes + m * (w.shape[0] + w.shape[1]) * w.element_size())
            xs = [torch.randn(m, w.shape[1], device=w.device, dtype=w.dtype) for _ in range(copies)]
            dense = [w] + [w.clone() for _ in range(copies - 1)]
            mods = [sparse] + [copy.deepcopy(sparse) for _ in range(copies - 1)]
            t_dense = time_rotating(lambda i, xs=xs, dense=dense: functional.linear(xs[i], dense[i], bias), copies,
                                    REPS, WARMUP_MS).p50_ms
            t_sparse = time_rotating(lambda i, xs=xs, mods=mods: mods[i](xs[i]), copies, REPS, WARMUP_MS).p50_ms
            out[m] = t_dense / t_sparse
            del xs, dense, mods
    return out


def decide(layers: list[tuple[str, nn.Linear, nn.Module]], tokens: tuple[int, ...], min_speedup: float
           ) -> list[LayerDecision]:
    """A decision per (name, dense layer, its sparse replacement), timing each distinct (shape, dtype, bias) once.
    Layers off the GPU are kept sparse, unmeasured."""
    cuda = [(name, lin, sp) for name, lin, sp in layers if _measurable(lin)]
    problems = [(m, sp.compressed(), lin.weight.dtype, lin.bias is not None) for _, lin, sp in cuda for m in tokens
                if hasattr(sp, "compressed")]
    if problems:
        precompile_for(problems)
    measured: dict[tuple, dict[int, float]] = {}
    decisions = []
    for name, lin, sp in layers:
        shape = (lin.out_features, lin.in_features)
        if not _measurable(lin):
            decisions.append(LayerDecision(name, shape, "sparse", {}, "not measured: the layer is not on a CUDA GPU"))
            continue
        key = (shape, lin.weight.dtype, lin.bias is not None, lin.weight.device)
        if key not in measured:
            measured[key] = measure_speedups(lin, sp, tokens)
        speed = measured[key]
        decisions.append(LayerDecision(name, shape, "sparse" if min(speed.values()) >= min_speedup else "dense",
                                       speed))
    return decisions


def _measurable(linear: nn.Linear) -> bool:
    return linear.weight.is_cuda

"""Gate and up projections of a gated MLP pruned together: one V:N:M weight for both.

``fuse_glu(gate, up, "128:2:8")`` interleaves the two ``hidden x k`` weights by V-blocks, [gate rows of block b;
up rows of block b] for every b, and prunes that ``2·hidden x k`` matrix as ``256:2:8``: the 256 rows of a block
keep the same 4 columns of every 8, chosen for the magnitude they keep over both. Each of gate and up on its own
is then a valid ``128:2:8`` weight (``split_glu``), and a kernel can gather x once for both (``vnm_glu_sm90``).
The cost is a joint column choice, reported by ``kept_fractions``.
"""

from __future__ import annotations

import torch

from ..errors import InputError, PatternError, ShapeError
from ..patterns import Pattern
from .vnm import VNMWeight, compress_vnm, kept_fraction, mask_vnm

PAIR_V = 128  # the V of each projection; the fused weight's V is twice it


def _parse(pattern: str | Pattern) -> Pattern:
    p = Pattern.parse(pattern)
    if p.v != PAIR_V:
        raise PatternError(f"gate/up fusion takes a {PAIR_V}:2:M pattern (its fused weight is 256:2:M), got {p}")
    return p


def interleave(gate: torch.Tensor, up: torch.Tensor, v: int = PAIR_V) -> torch.Tensor:
    """The ``2·hidden x k`` matrix [gate block b; up block b] over the V-blocks b (hidden % v == 0)."""
    if not (isinstance(gate, torch.Tensor) and isinstance(up, torch.Tensor)) or gate.dim() != 2:
        raise InputError("gate and up must be 2-D tensors (hidden x in_features)")
    if gate.shape != up.shape:
        raise ShapeError(f"gate and up must have one shape, got {tuple(gate.shape)} and {tuple(up.shape)}")
    hidden, k = gate.shape
    if hidden % v:
        raise ShapeError(f"gate/up fusion needs hidden % {v} == 0, got hidden = {hidden}")
    return torch.stack((gate.reshape(-1, v, k), up.reshape(-1, v, k)), dim=1).reshape(2 * hidden, k)


def deinterleave(fused: torch.Tensor, v: int = PAIR_V) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate, up) from an interleaved ``2·hidden x ...`` tensor (rows, or the columns of y = x · fusedᵀ with
    ``dim=-1`` moved first)."""
    pairs = fused.reshape(-1, 2, v, *fused.shape[1:])
    return pairs[:, 0].reshape(-1, *fused.shape[1:]), pairs[:, 1].reshape(-1, *fused.shape[1:])


def fuse_glu(gate: torch.Tensor, up: torch.Tensor, pattern: str | Pattern = "128:2:8") -> VNMWeight:
    """Magnitude-prune gate and up together and compress them into one ``256:2:M`` weight (see the module)."""
    p = _parse(pattern)
    return compress_vnm(interleave(gate, up), Pattern(2, p.m, 2 * PAIR_V), prune=True)


def split_glu(fused: VNMWeight) -> tuple[torch.Tensor, torch.Tensor]:
    """The pruned dense (gate, up) of a fused weight."""
    if fused.pattern.v != 2 * PAIR_V:
        raise PatternError(f"a fused gate/up weight is 256:2:M, got {fused.pattern}")
    return deinterleave(fused.to_dense())


def kept_fractions(gate: torch.Tensor, up: torch.Tensor, pattern: str | Pattern = "128:2:8") -> dict[str, float]:
    """Kept magnitude (Σ|w| kept / Σ|w| over gate and up) pruned jointly (fused) and separately."""
    p = _parse(pattern)
    both = interleave(gate, up)
    joint = kept_fraction(both, mask_vnm(both, Pattern(2, p.m, 2 * PAIR_V)))
    separate = kept_fraction(both, interleave(mask_vnm(gate, p), mask_vnm(up, p)))
    return {"joint": joint, "separate": separate}


def swiglu_reference(x: torch.Tensor, gate_up: VNMWeight) -> torch.Tensor:
    """h = silu(x·Gᵀ) ⊙ (x·Uᵀ) through the decompressed fused weight, in x's dtype (any device)."""
    gate, up = deinterleave(gate_up.to_dense().to(x.dtype))
    return torch.nn.functional.silu(x @ gate.T) * (x @ up.T)

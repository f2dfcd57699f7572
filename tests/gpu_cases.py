"""Random GPU problems and their fp64 references, shared by the GPU test modules."""

from __future__ import annotations

import torch

import cutlass_nm


def case(m: int, n: int, k: int, pattern: str, dtype: torch.dtype, seed: int, with_bias: bool):
    """x (m x k), a weight pruned to ``pattern`` (n x k), an optional bias, and x·Wᵀ + bias in fp64."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    w, _ = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=dtype, generator=g), pattern)
    bias = torch.randn(n, device="cuda", dtype=dtype, generator=g) if with_bias else None
    ref = x.double() @ w.to_dense().double().T
    if bias is not None:
        ref += bias.double()
    return x, w, bias, ref


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    """‖y − ref‖ / ‖ref‖ in fp64."""
    return ((y.double() - ref).norm() / ref.norm()).item()

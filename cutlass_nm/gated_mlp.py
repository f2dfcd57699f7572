"""A gated (SwiGLU) MLP, ``down(silu(x·Gᵀ) ⊙ (x·Uᵀ))``, over V:N:M weights, with gate and up as one fused weight.

On Hopper, from m = 17 tokens, it is two kernels: ``vnm_glu_sm90`` (gate and up in one GEMM that gathers x once
for both, the SiLU and the product in its epilogue, h written transposed) and ``vnm_sm90`` for the down
projection, gathering straight from that transposed h. Elsewhere, and for decode batches, it runs the fused weight
through ``matmul`` (one GEMM for gate and up), the SwiGLU in torch, then ``matmul`` for down.
"""

from __future__ import annotations

import torch

from .dispatch import check_inputs, kernel_for, kernels_for, matmul
from .errors import InputError
from .families.launch import device_info
from .formats.glu import PAIR_V, swiglu_reference
from .formats.vnm import VNMWeight
from .routing import DECODE_MAX_M


def check_pair(gate_up: VNMWeight, down: VNMWeight) -> None:
    """Raise unless ``gate_up`` is a fused 256:2:M weight and ``down`` a V:N:M weight that takes its output."""
    if not isinstance(gate_up, VNMWeight) or gate_up.pattern.v != 2 * PAIR_V:
        raise InputError("gate_up must be a fused gate/up weight (cutlass_nm.formats.glu.fuse_glu: 256:2:M)")
    if not isinstance(down, VNMWeight):
        raise InputError(f"down must be a V:N:M weight (cutlass_nm.prune(w, '128:2:8')), got {type(down).__name__}")
    if down.in_features != gate_up.out_features // 2:
        raise InputError(f"down's in_features {down.in_features} must equal the hidden size "
                         f"{gate_up.out_features // 2} of gate_up")


def swiglu(y: torch.Tensor) -> torch.Tensor:
    """silu(gate) · up from y = x · gate_upᵀ (..., 2·hidden), whose columns interleave gate and up V-blocks."""
    pairs = y.unflatten(-1, (-1, 2, PAIR_V))
    return (torch.nn.functional.silu(pairs[..., 0, :]) * pairs[..., 1, :]).flatten(-2)


def gated_mlp(x: torch.Tensor, gate_up: VNMWeight, down: VNMWeight) -> torch.Tensor:
    """``down(silu(x·Gᵀ) ⊙ (x·Uᵀ))`` for x (..., k) fp16/bf16 on a CUDA device; returns (..., out_features)."""
    check_pair(gate_up, down)
    x2 = x.reshape(-1, x.shape[-1])
    m = x2.shape[0]
    if m > DECODE_MAX_M:  # a decode batch's two matmuls check x on its signature's first call, then repeat it
        check_inputs(x, gate_up, None)
    if not fused(m, x.device):
        return matmul(swiglu(matmul(x2, gate_up)), down).reshape(*x.shape[:-1], down.out_features)
    hidden, ldx = down.in_features, -(-m // 8) * 8
    ht = torch.empty(down.padded_k, ldx, dtype=x.dtype, device=x.device)  # h transposed: what down gathers
    if down.padded_k > hidden:
        ht[hidden:].zero_()  # down's padding columns (zero weights) gather these rows
    kernel_for("vnm_glu_sm90", x2, gate_up, x.dtype)(x2, gate_up, None, ht)
    h = ht[:hidden].t()[:m]  # h (m x hidden) as a view: the down kernel reads only its shape, and gathers ht
    y = torch.empty(m, down.out_features, dtype=x.dtype, device=x.device)
    kernel_for("vnm_sm90", h, down, x.dtype)(h, down, None, y, ht)
    return y.reshape(*x.shape[:-1], down.out_features)


def fused(m: int, device: torch.device) -> bool:
    """Whether m rows on ``device`` take the fused gate/up kernel (Hopper, above the decode path) rather than two
    matmuls."""
    return m > DECODE_MAX_M and device_info(device).capability == (9, 0)


def gated_mlp_kernels(m: int, gate_up: VNMWeight, down: VNMWeight, dtype: torch.dtype) -> list[tuple]:
    """The kernel ids ``gated_mlp`` runs for m rows of ``dtype`` on the weights' GPU (nothing is compiled)."""
    if not fused(m, gate_up.device):
        return kernels_for([(m, gate_up, dtype, False), (m, down, dtype, False)])
    return (kernels_for([(m, gate_up, dtype, False)], "vnm_glu_sm90")
            + kernels_for([(m, down, dtype, False)], "vnm_sm90"))


def reference(x: torch.Tensor, gate_up: VNMWeight, down: VNMWeight) -> torch.Tensor:
    """The same function through the decompressed weights, in x's dtype (any device)."""
    return swiglu_reference(x, gate_up) @ down.to_dense().to(x.dtype).T

"""Per-architecture hardware facts in one table, read for the GPU actually present.

Families check configs against :func:`target`: the current CUDA device's row (its SM count and L2 read from
the device), or, on a machine without a GPU, the row named by ``$CUTLASS_NM_PLAN_ARCH`` (default ``sm_90``),
so that kernels can be planned and compiled ahead of time for a Hopper GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Arch:
    """What a kernel plan needs to know about a GPU. Rates are per GPU: measured ceilings where we have them."""

    name: str  # "sm_80", "sm_90"
    sm_count: int
    smem_per_block: int  # opt-in dynamic shared memory per block, bytes
    smem_per_sm: int  # shared memory per SM (each resident CTA also reserves 1 KB of it), bytes
    regs_per_sm: int
    l2_bytes: int
    dense_flops: float  # fp16/bf16 tensor-core multiply-adds x 2 per second (dense)
    simt_flops: float  # fp32 FMA x 2 per second on CUDA cores
    bandwidth: float  # device-to-device copy, bytes per second
    l2_bandwidth: float  # bytes per second read out of L2 by all SMs

    @property
    def sparse_flops(self) -> float:
        """Sparse Tensor Cores: twice the dense rate, counted in dense-equivalent flops."""
        return 2 * self.dense_flops


# sm_90: the H100 SXM measured here (cuBLAS fp16 ~700 TFLOP/s at 8192^3, copy 3.0 TB/s, L2 7.25 TB/s).
# sm_80: the A100 SXM's datasheet figures.
ARCHS: dict[str, Arch] = {
    "sm_80": Arch("sm_80", sm_count=108, smem_per_block=166912, smem_per_sm=167936, regs_per_sm=65536,
                  l2_bytes=40 << 20, dense_flops=3.12e14, simt_flops=1.95e13, bandwidth=1.9e12,
                  l2_bandwidth=5.0e12),
    "sm_90": Arch("sm_90", sm_count=132, smem_per_block=232448, smem_per_sm=233472, regs_per_sm=65536,
                  l2_bytes=50 << 20, dense_flops=7.0e14, simt_flops=6.7e13, bandwidth=3.0e12,
                  l2_bandwidth=7.25e12),
}
PLAN_ENV = "CUTLASS_NM_PLAN_ARCH"
HOPPER = ARCHS["sm_90"]


def arch_name(capability: tuple[int, int]) -> str:
    """The table row a compute capability plans with: sm_90 for 9.x, sm_80 for 8.x and anything newer."""
    return "sm_90" if capability[0] == 9 else "sm_80"


@functools.cache
def _device_arch(index: int) -> Arch:
    import torch

    p = torch.cuda.get_device_properties(index)
    row = ARCHS[arch_name((p.major, p.minor))]
    l2 = int(getattr(p, "L2_cache_size", 0)) or row.l2_bytes
    return dataclasses.replace(row, sm_count=p.multi_processor_count, l2_bytes=l2)


def target(device: int | None = None) -> Arch:
    """The architecture kernels are planned for: the CUDA device ``device`` (default: the current one) when
    there is one, else the row ``$CUTLASS_NM_PLAN_ARCH`` names (default sm_90)."""
    import torch

    if torch.cuda.is_available():
        return _device_arch(torch.cuda.current_device() if device is None else device)
    name = os.environ.get(PLAN_ENV, "sm_90")
    if name not in ARCHS:
        raise ValueError(f"{PLAN_ENV}={name!r} is not one of {sorted(ARCHS)}")
    return ARCHS[name]

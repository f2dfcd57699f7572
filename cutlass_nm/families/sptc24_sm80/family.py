"""2:4 on Ampere Sparse Tensor Cores: CUTLASS's ``SparseGemm`` (mma.sp m16n8k32, cp.async multistage).

Runs on sm_80 and newer, so it is also the baseline the Hopper family is compared with on an H100.
CUTLASS's 2.x sparse GEMM writes D row-major, so this family computes yᵀ and transposes it
(one extra pass over the output), and adds the bias with a separate op. Its rules (CUTLASS's): k a multiple of
the tile K, n % 32 == 0; m % 8 != 0 costs a zero-padded copy of x.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...arch import ARCHS
from ...formats import Sparse24Weight, meta_sm80
from ..base import Family, FamilyConfig, KernelTypes, Problem, half_inputs_only
from ..launch import check_status, stream_of, torch_dtype, workspace

SMEM_BYTES = ARCHS["sm_80"].smem_per_block  # the family targets sm_80 (and runs on sm_90)
# (tile, warp) pairs CUTLASS instantiates for the 16-bit sparse GEMM.
TILE_SHAPES = {
    (64, 128, 64): (32, 64), (256, 128, 64): (64, 64), (128, 256, 64): (64, 64), (128, 128, 64): (64, 64),
    (256, 64, 64): (64, 64), (64, 256, 64): (64, 64), (128, 64, 64): (64, 32), (64, 64, 64): (32, 32),
    (128, 128, 128): (64, 32), (256, 64, 128): (64, 64), (128, 64, 128): (64, 32), (64, 128, 128): (32, 64),
    (64, 64, 128): (32, 32),
}


@dataclass(frozen=True, slots=True)
class Config(FamilyConfig):
    """CTA tile, warp tile, cp.async stages and threadblock swizzle."""

    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 64
    warp_m: int = 64
    warp_n: int = 64
    stages: int = 3
    swizzle: int = 4

    SPACE: ClassVar = {
        "tile_m": (64, 128, 256),
        "tile_n": (64, 128, 256),
        "tile_k": (64, 128),
        "warp_m": (32, 64),
        "warp_n": (32, 64),
        "stages": (2, 3, 4, 5, 6),
        "swizzle": (1, 2, 4, 8),
    }


def smem_per_stage(cfg: Config) -> int:
    return cfg.tile_m * cfg.tile_k + cfg.tile_m * cfg.tile_k // 8 + cfg.tile_n * cfg.tile_k * 2


class _Sm80Family(Family):
    name = "sptc24_sm80"
    arch = "sm_80"
    weight = Sparse24Weight
    Config = Config
    templates = ("families/sptc24_sm80/kernel.cu", "codegen/cutlass_emit.py")

    def check(self, cfg: Config, problem: Problem) -> str | None:
        if (reason := half_inputs_only(problem.types)) is not None:
            return reason
        if TILE_SHAPES.get((cfg.tile_m, cfg.tile_n, cfg.tile_k)) != (cfg.warp_m, cfg.warp_n):
            tile = f"{cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k}"
            return f"tile {tile} with warp {cfg.warp_m}x{cfg.warp_n} is not instantiable"
        if cfg.stages * smem_per_stage(cfg) > SMEM_BYTES:
            return f"{cfg.stages} stages of {smem_per_stage(cfg)} B exceed {SMEM_BYTES} B of shared memory"
        if problem.k % cfg.tile_k:
            return (f"in_features k={problem.k} must be a multiple of the tile K ({cfg.tile_k}): CUTLASS's "
                    "SparseGemm cannot zero-fill metadata for a K remainder")
        if problem.n % 32:
            return f"out_features n={problem.n} must be a multiple of 32 (metadata rows are reordered in 32s)"
        return None

    def source(self, cfg: Config, types: KernelTypes) -> str:
        from ...codegen.cutlass_emit import emit_sm80, sm80_sparse_operation

        op = sm80_sparse_operation(
            tile=(cfg.tile_m, cfg.tile_n, cfg.tile_k), warp=(cfg.warp_m, cfg.warp_n, cfg.tile_k),
            stages=cfg.stages, dtype=types.dtype, out_dtype=types.out_dtype, swizzle=cfg.swizzle)
        return emit_sm80(op, self.template("families/sptc24_sm80/kernel.cu"))

    def heuristic(self, problem: Problem) -> Config:
        if problem.m <= 64:
            return Config(tile_m=128, tile_n=64, tile_k=64, warp_m=64, warp_n=32, stages=4)
        return Config()

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, helpers: Sequence[Callable] = ()) -> _Launcher:
        return _Launcher(lib, types)


class _Launcher:
    """A loaded sm80 2:4 kernel: ``launcher(x, w, bias) -> y`` on torch's current stream."""

    def __init__(self, lib: ctypes.CDLL, types: KernelTypes) -> None:
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        lib.cnm_run.argtypes = [vp, vp, vp, vp, i32, i32, i32, i32, i32, vp, vp]
        lib.cnm_run.restype = i32
        lib.cnm_workspace_size.argtypes = [i32, i32, i32, i32]
        lib.cnm_workspace_size.restype = ctypes.c_size_t
        self.run, self.ws_size = lib.cnm_run, lib.cnm_workspace_size
        self.ws_bytes: dict[tuple[int, int, int, int], int] = {}  # (n, ldd, k, e_rows) -> bytes, asked once
        self.out_dtype = torch_dtype(types.out_dtype)

    def __call__(self, x: torch.Tensor, w, bias: torch.Tensor | None, y: torch.Tensor) -> None:
        """Write x·Wᵀ (+ bias) into y (m x n, contiguous)."""
        m, k = x.shape
        n = w.out_features
        e = w.layout(("sm80",), meta_sm80.to_sm80)
        e_rows = meta_sm80.padded_shape(n, k)[0]
        ldd = -(-m // 8) * 8  # CUTLASS's SparseGemm needs N = m % 8 == 0: pad x with zero rows
        if ldd != m:
            x = torch.cat((x, x.new_zeros(ldd - m, k)))
        yt = torch.empty(n, ldd, dtype=self.out_dtype, device=x.device)
        nbytes = self.ws_bytes.get((n, ldd, k, e_rows))
        if nbytes is None:
            nbytes = self.ws_bytes[(n, ldd, k, e_rows)] = self.ws_size(n, ldd, k, e_rows)
        ws = workspace(x.device, nbytes)
        stream = stream_of(x)
        status = self.run(w.values.data_ptr(), e.data_ptr(), x.data_ptr(), yt.data_ptr(), n, ldd, k, ldd, e_rows,
                          ws, stream)
        check_status(status, FAMILY.name, (m, n, k))
        y.copy_(yt[:, :m].t())
        if bias is not None:
            y += bias


FAMILY = _Sm80Family()

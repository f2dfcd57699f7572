"""2:4 on Ampere Sparse Tensor Cores: CUTLASS's ``SparseGemm`` (mma.sp m16n8k32, cp.async multistage).

Runs on sm_80 and newer, so it is also the baseline the Hopper family is compared with on an H100.
CUTLASS's 2.x sparse GEMM writes D row-major, so this family computes yᵀ into a scratch and a second kernel of the
same C call transposes it into y, adding the bias (one extra pass over the output). Its rules (CUTLASS's): k a
multiple of the tile K, n % 32 == 0; the scratch's rows are m rounded up to 8 (x itself is read, never padded).
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
from ..launch import (
    Plans,
    capturing,
    check_status,
    gil_holding,
    packed_launch,
    steady_call,
    stream_of,
    workspace_buffer,
)

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
        return _Launcher(lib)


class RepeatArgs(ctypes.Structure):
    """The template's ``RepeatArgs``: a remembered call's plan and yᵀ scratch."""

    _fields_ = [("plan", ctypes.c_void_p), ("scratch", ctypes.c_void_p)]


class _Launcher:
    """A loaded sm80 2:4 kernel: ``launcher(x, w, bias, y)`` on torch's current stream.

    One C call runs the GEMM into yᵀ (n x ldd, ldd = m rounded up to 8) in a scratch and a kernel that writes
    y = (yᵀ)ᵀ (+ bias) from it. Each (weight, bias, m) runs from a plan, the GEMM's parameters built once, with the
    scratch of the call's stream; under CUDA graph capture each call builds them, with a scratch in the graph's pool.
    """

    def __init__(self, lib: ctypes.CDLL) -> None:
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        lib.cnm_plan_bytes.restype = ctypes.c_size_t
        lib.cnm_plan.argtypes = [vp, vp, vp, vp, i32, i32, i32, i32]
        lib.cnm_plan.restype = i32
        lib.cnm_scratch_bytes.argtypes = [i32, i32]
        lib.cnm_scratch_bytes.restype = ctypes.c_size_t
        self.lib = lib
        self.run = gil_holding(lib, "cnm_run", i32, vp, vp, vp, vp, vp, vp, i32, i32, i32, i32, vp)
        self.launch = gil_holding(lib, "cnm_launch", i32, vp, vp, vp, vp, vp)
        self.repeat = packed_launch(lib, RepeatArgs, FAMILY.name, "cnm_repeat")
        self.plan_bytes = lib.cnm_plan_bytes()
        self.plans = Plans()
        self.scratch_bytes: dict[tuple[int, int], int] = {}  # (n, m) -> bytes of yᵀ, asked once

    def __call__(self, x: torch.Tensor, w, bias: torch.Tensor | None, y: torch.Tensor) -> None:
        """Write x·Wᵀ (+ bias) into y (m x n, contiguous)."""
        key, _ = self._key(x, w, bias)
        if capturing():
            self._run(key, x, y)
            return
        plan = self.plans.get(key)
        if plan is None:
            plan = self._plan(key)
        stream = stream_of(x)
        scratch = workspace_buffer(x.device, self._scratch(key), stream)
        status = self.launch(plan, x.data_ptr(), y.data_ptr(), scratch.data_ptr(), stream)
        if status:
            check_status(status, FAMILY.name, key[3:])

    def steady(self, x: torch.Tensor, w, bias: torch.Tensor | None, y: torch.Tensor) -> Callable[..., None]:
        """After a first call on (x, w, bias): its plan and the scratch of this call's stream packed once
        (``cnm_repeat``), for matmul to repeat; another stream, or that one while it captures, takes the launcher."""
        key, e = self._key(x, w, bias)
        plan = self.plans.get(key)
        if plan is None:
            return self
        home = stream_of(x)
        scratch = workspace_buffer(x.device, self._scratch(key), home)
        args = RepeatArgs(ctypes.addressof(plan), scratch.data_ptr())
        return steady_call(self.repeat, ctypes.addressof(args), (args, w.values, e, bias, scratch, plan), FAMILY.name,
                           key[3:], on=(home, self))

    @staticmethod
    def _key(x: torch.Tensor, w, bias: torch.Tensor | None) -> tuple[tuple[int, ...], torch.Tensor]:
        """The plan key of a call on (x, w, bias) (weight, metadata and bias addresses, m, n, k) and the metadata
        layout it launches on."""
        e = w.layout(("sm80",), meta_sm80.to_sm80)
        return (w.values.data_ptr(), e.data_ptr(), 0 if bias is None else bias.data_ptr(), x.shape[0],
                w.out_features, x.shape[1]), e

    def _plan(self, key: tuple[int, ...]) -> ctypes.Array:
        """Build and keep the plan of ``key`` (the kernel's shared-memory attribute set on the current device)."""
        a, e, bias, m, n, k = key
        plan = ctypes.create_string_buffer(self.plan_bytes)
        status = self.lib.cnm_plan(plan, a, e, bias or None, n, m, k, meta_sm80.padded_shape(n, k)[0])
        check_status(status, FAMILY.name, (m, n, k))
        return self.plans.keep(key, plan)

    def _run(self, key: tuple[int, ...], x: torch.Tensor, y: torch.Tensor) -> None:
        """The per-call path: parameters built and both kernels launched in one C call, through a scratch of its
        own (allocated on the stream, in the graph's pool under capture)."""
        a, e, bias, m, n, k = key
        scratch = torch.empty(self._scratch(key), dtype=torch.uint8, device=x.device)
        status = self.run(a, e, x.data_ptr(), y.data_ptr(), bias or None, scratch.data_ptr(), n, m, k,
                          meta_sm80.padded_shape(n, k)[0], stream_of(x))
        check_status(status, FAMILY.name, (m, n, k))

    def _scratch(self, key: tuple[int, ...]) -> int:
        """Bytes of the yᵀ scratch of ``key``'s problem."""
        n, m = key[4], key[3]
        nbytes = self.scratch_bytes.get((n, m))
        if nbytes is None:
            nbytes = self.scratch_bytes[(n, m)] = self.lib.cnm_scratch_bytes(n, m)
        return nbytes


FAMILY = _Sm80Family()

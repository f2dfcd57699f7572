"""2:4 on Hopper Sparse Tensor Cores: CUTLASS's wgmma.sp collective, TMA, warp-specialized."""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...arch import HOPPER, target
from ...formats import Sparse24Weight, meta_sm90
from ..base import Family, FamilyConfig, KernelTypes, Problem, half_inputs_only, package_file, pipelined_mma_rule
from ..launch import Plans, call_scratch, check_status, device_info, gil_holding, steady_call, stream_of

EPILOGUE_SMEM = 34 * 1024  # conservative TMA-epilogue carve-out
MAX_ACC_PER_THREAD = 128  # fp32 accumulators per thread before spilling
RASTER_ORDER = {"heuristic": 0, "m": 1, "n": 2}  # cutlass::gemm::kernel::detail::RasterOrderOptions
_NO_PLAN = object()  # a plans lookup miss
SM90_PLAN = "codegen/sm90_plan.cuh"  # the plan launch, shared with sptc24_fp8_sm90


@dataclass(frozen=True, slots=True)
class Config(FamilyConfig):
    """CTA tile, cluster, schedule, pipeline depth (0 = as many as fit), raster swizzle, tile scheduler
    (persistent data-parallel, or stream-K, which splits the last wave's K across idle SMs), raster order
    (CUTLASS picks by problem shape, or along M / along N) and the consumer mainloop (``mma_pipe`` 0: CUTLASS's,
    which waits for each k-tile's wgmma.sp batch before the next; 1: ours, one batch kept in flight)."""

    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 64
    cluster_m: int = 1
    cluster_n: int = 2
    schedule: str = "cooperative"
    stages: int = 0
    swizzle: int = 1
    scheduler: str = "persistent"
    raster: str = "heuristic"
    mma_pipe: int = 0

    SPACE: ClassVar = {
        "tile_m": (64, 128, 256),
        "tile_n": (64, 128, 256),
        "tile_k": (64, 128),
        "cluster_m": (1, 2),
        "cluster_n": (1, 2),
        "schedule": ("cooperative", "pingpong"),
        "stages": (0, 2, 3, 4, 5, 6, 7),
        "swizzle": (1, 2, 4, 8),
        "scheduler": ("persistent", "streamk"),
        "raster": ("heuristic", "m", "n"),
        "mma_pipe": (0, 1),
    }


def smem_per_stage(cfg: Config) -> int:
    """Bytes of one pipeline stage: compressed A (half of K), metadata (1 bit per element), B."""
    return cfg.tile_m * cfg.tile_k + cfg.tile_m * cfg.tile_k // 8 + cfg.tile_n * cfg.tile_k * 2


def pipeline_stages(cfg: Config, out_bytes: int = 2) -> int:
    """Stages the kernel runs: ``cfg.stages``, or what CUTLASS's auto count fits next to the epilogue's shared
    memory (two D buffers of its epilogue tile: 128 x 32 cooperative, 64 x 32 pingpong) when ``stages`` is 0."""
    if cfg.stages:
        return cfg.stages
    epi_m = min(128 if cfg.schedule == "cooperative" else 64, cfg.tile_m)
    epilogue = 2 * epi_m * min(32, cfg.tile_n) * out_bytes
    return (HOPPER.smem_per_block - epilogue) // (smem_per_stage(cfg) + 32)  # + the stage's pipeline barriers


def schedule_rule(cfg) -> str | None:
    """The warp-specialized schedule's rules on a CTA tile (any sm90 CUTLASS GEMM config with ``tile_m``,
    ``tile_n`` and ``schedule``): cooperative splits M over two warpgroups, pingpong gives each one a whole tile,
    and the fp32 accumulators must fit the registers."""
    wgs = 2 if cfg.schedule == "cooperative" else 1
    if cfg.schedule == "cooperative" and cfg.tile_m < 128:
        return "cooperative splits tile M across two warpgroups: tile_m must be >= 128"
    if cfg.schedule == "pingpong" and cfg.tile_m > 128:
        return "pingpong gives each warpgroup a whole tile: tile_m must be <= 128"
    if cfg.tile_m * cfg.tile_n // (128 * wgs) > MAX_ACC_PER_THREAD:
        return f"{cfg.tile_m}x{cfg.tile_n} needs more than {MAX_ACC_PER_THREAD} accumulators per thread"
    return None


def alignment_rule(problem: Problem) -> str | None:
    """The data-layout rules every sm90 2:4 kernel shares (TMA needs 16-byte strides)."""
    if problem.k % 16:
        return f"in_features k={problem.k} must be a multiple of 16 (TMA needs the compressed rows 16-byte aligned)"
    out_align = 4 if problem.types.out_dtype == "f32" else 8
    if problem.n % out_align:
        return f"out_features n={problem.n} must be a multiple of {out_align} for {problem.types.out_dtype} output"
    if problem.m < 1:
        return "m must be >= 1"
    return None


class _Sm90Family(Family):
    name = "sptc24_sm90"
    arch = "sm_90a"
    weight = Sparse24Weight
    Config = Config
    templates = ("families/sptc24_sm90/kernel.cu", "codegen/sparse_mainloop.cuh", "codegen/cutlass_emit.py",
                 SM90_PLAN)

    def check(self, cfg: Config, problem: Problem) -> str | None:
        if (reason := half_inputs_only(problem.types)) is not None:
            return reason
        if cfg.scheduler == "streamk" and cfg.schedule != "cooperative":
            return "stream-K needs the cooperative schedule (CUTLASS's pingpong kernel has no stream-K)"
        if (reason := schedule_rule(cfg)) is not None:
            return reason
        fit = (target().smem_per_block - EPILOGUE_SMEM) // smem_per_stage(cfg)
        need = cfg.stages or 2
        if need > fit:
            return f"{need} stages of {smem_per_stage(cfg)} B do not fit in shared memory ({fit} fit)"
        out_bytes = 4 if problem.types.out_dtype == "f32" else 2
        if (reason := pipelined_mma_rule(cfg.mma_pipe, pipeline_stages(cfg, out_bytes))) is not None:
            return reason
        return alignment_rule(problem)

    def source(self, cfg: Config, types: KernelTypes) -> str:
        from ...codegen.cutlass_emit import emit_sm90, sm90_sparse_operation

        op = sm90_sparse_operation(
            tile=(cfg.tile_m, cfg.tile_n, cfg.tile_k), cluster=(cfg.cluster_m, cfg.cluster_n),
            schedule=cfg.schedule, stages=cfg.stages, dtype=types.dtype, out_dtype=types.out_dtype,
            bias=types.bias, streamk=cfg.scheduler == "streamk")
        mainloop = package_file(self.templates[1]).read_text()
        out_bytes = 4 if types.out_dtype == "f32" else 2
        return emit_sm90(op, self.template(self.templates[0]), sparse_mainloop=mainloop,
                         sm90_plan=package_file(SM90_PLAN).read_text(),
                         has_bias="true" if types.bias else "false", mma_pipe=int(cfg.mma_pipe),
                         stages_expected=pipeline_stages(cfg, out_bytes))

    def heuristic(self, problem: Problem) -> Config:
        """The shipping grid's best per token count (H100, 130 problems; the token count m is the GEMM's N):
        m <= 32 128x64x128, cluster 2x1; m <= 128 64x64x128 ping-pong; m <= 512 128x128x128; above, 128x256x64,
        raster n, swizzle 8. All persistent (no stream-K workspace). Our pipelined mainloop (``mma_pipe`` 1)
        where the stages allow it (f32 output may not)."""
        if problem.m <= 32:
            cfg = Config(tile_m=128, tile_n=64, tile_k=128, cluster_m=2, cluster_n=1, mma_pipe=1)
        elif problem.m <= 128:
            cfg = Config(tile_m=64, tile_n=64, tile_k=128, cluster_m=1, cluster_n=1, schedule="pingpong", mma_pipe=1)
        elif problem.m <= 512:
            cfg = Config(tile_m=128, tile_n=128, tile_k=128, cluster_m=1, cluster_n=1, mma_pipe=1)
        else:
            cfg = Config(tile_m=128, tile_n=256, tile_k=64, cluster_m=1, cluster_n=1, raster="n", swizzle=8,
                         mma_pipe=1)
        if self.check(cfg, problem) is not None:
            cfg = dataclasses.replace(cfg, mma_pipe=0)
        return cfg

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, helpers: Sequence[Callable] = ()) -> _Launcher:
        return _Launcher(lib, cfg, types)


class _Launcher:
    """A loaded sm90 2:4 kernel: ``launcher(x, w, bias, y)`` on torch's current stream.

    A problem that needs no workspace runs from a plan: the kernel's parameters, built once per (weight, bias, m)
    and launched with only x's and y's addresses patched in. Stream-K problems (a workspace) build them per call."""

    def __init__(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes) -> None:
        vp, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
        lib.cnm_run.argtypes = [vp, vp, vp, vp, vp, i32, i32, i32, i32, i32, i32, vp, i64, vp]
        lib.cnm_run.restype = i32
        lib.cnm_workspace_size.argtypes = [i32, i32, i32, i32, i32, i32]
        lib.cnm_workspace_size.restype = ctypes.c_size_t
        lib.cnm_meta_atom_k.restype = i32
        lib.cnm_plan_bytes.restype = ctypes.c_size_t
        lib.cnm_plan.argtypes = [vp, vp, vp, vp, vp, vp, i32, i32, i32, i32, i32, i32, i64]
        lib.cnm_plan.restype = i32
        self.lib = lib
        self.launch = gil_holding(lib, "cnm_launch", i32, vp, vp, vp, vp)
        self.plan_bytes = lib.cnm_plan_bytes()
        # a plan, or (stream-K) the workspace bytes its per-call path needs, asked once
        self.plans = Plans()
        self.swizzle, self.raster = cfg.swizzle, RASTER_ORDER[cfg.raster]
        atom = lib.cnm_meta_atom_k()
        self.layout_key = ("sm90", atom)
        self.build_layout = lambda w: meta_sm90.to_sm90(w, atom)

    def __call__(self, x: torch.Tensor, w, bias: torch.Tensor | None, y: torch.Tensor) -> None:
        """Write x·Wᵀ (+ bias) into y (m x n, contiguous)."""
        m, k = x.shape
        key, _ = self._key(x, w, bias)
        plan = self.plans.get(key, _NO_PLAN)
        if plan is _NO_PLAN:
            plan = self._plan(key, x, y)
        if type(plan) is int:
            self._run(key, x, y, plan)
            return
        status = self.launch(plan, x.data_ptr(), y.data_ptr(), stream_of(x))
        if status:
            check_status(status, FAMILY.name, (m, w.out_features, k))

    def steady(self, x: torch.Tensor, w, bias: torch.Tensor | None, y: torch.Tensor) -> Callable[..., None]:
        """After a first call on (x, w, bias): its plan's launch alone, for matmul to repeat (itself where the
        problem runs per call, with a stream-K workspace)."""
        key, e = self._key(x, w, bias)
        plan = self.plans.get(key)
        if plan is None or type(plan) is int:
            return self
        return steady_call(self.launch, plan, (w.values, e, bias), FAMILY.name,
                           (x.shape[0], w.out_features, x.shape[1]))

    def _key(self, x: torch.Tensor, w, bias: torch.Tensor | None) -> tuple[tuple[int, ...], torch.Tensor]:
        """The plan key of a call on (x, w, bias) (weight, metadata and bias addresses, m, n, k, the metadata's
        pitch: 0 for a flat layout) and the metadata layout it launches on."""
        e = w.layout(self.layout_key, self.build_layout)
        pitch = e.stride(0) if e.dim() == 2 else 0
        return (w.values.data_ptr(), e.data_ptr(), 0 if bias is None else bias.data_ptr(), x.shape[0],
                w.out_features, x.shape[1], pitch), e

    def _plan(self, key: tuple[int, ...], x: torch.Tensor, y: torch.Tensor) -> ctypes.Array | int:
        """Build and keep the plan of ``key``, or, when the problem needs a workspace (stream-K), its size."""
        a, e, bias, m, n, k, pitch = key
        sms = device_info(x.device).sm_count
        plan = self.lib.cnm_workspace_size(n, m, k, sms, self.swizzle, self.raster)
        if plan == 0:
            plan = ctypes.create_string_buffer(self.plan_bytes)
            status = self.lib.cnm_plan(plan, a, e, x.data_ptr(), y.data_ptr(), bias or None, n, m, k, sms,
                                       self.swizzle, self.raster, pitch)
            check_status(status, FAMILY.name, (m, n, k))
        return self.plans.keep(key, plan)

    def _run(self, key: tuple[int, ...], x: torch.Tensor, y: torch.Tensor, nbytes: int) -> None:
        """Build the parameters and launch in one call (a problem with a workspace of ``nbytes``)."""
        a, e, bias, m, n, k, pitch = key
        sms = device_info(x.device).sm_count
        scratch = call_scratch(x.device, nbytes)
        status = self.lib.cnm_run(a, e, x.data_ptr(), y.data_ptr(), bias or None, n, m, k, sms, self.swizzle,
                                  self.raster, None if scratch is None else scratch.data_ptr(), pitch,
                                  stream_of(x))
        check_status(status, FAMILY.name, (m, n, k))


FAMILY = _Sm90Family()

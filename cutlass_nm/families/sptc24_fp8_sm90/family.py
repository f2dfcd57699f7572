"""FP8 (e4m3) 2:4 on Hopper Sparse Tensor Cores: CUTLASS's wgmma.sp collective (m64nNk64 e4m3, fp32 accumulation),
TMA, warp-specialized, with the scales fused in the epilogue: y = sx[token] * sw[channel] * (x_q · W_qᵀ) (+ bias),
each scale a vector or one scalar."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ...arch import target
from ...formats import meta_sm90
from ...formats.fp8 import Sparse24FP8Weight
from ..base import Family, FamilyConfig, KernelTypes, Problem, package_file
from ..launch import Plans, check_status, device_info, gil_holding, steady_call, stream_of, workspace_buffer
from ..sptc24_sm90.family import EPILOGUE_SMEM, RASTER_ORDER, SM90_PLAN, schedule_rule

K_MULTIPLE = 32  # the compressed rows (k / 2 bytes) and x's rows (k bytes) are TMA boxes: 16-byte aligned
OUT_DTYPES = ("bf16", "f16")
QUANTIZE_ROWS = "codegen/quantize_rows.cuh"  # the per-token quantizer, spliced into each FP8 GEMM


def fp8_types_rule(types: KernelTypes) -> str | None:
    """Why an FP8 GEMM cannot take ``types`` (e4m3 in, bf16/fp16 out), or None."""
    if types.dtype != "e4m3":
        return f"input dtype {types.dtype} is not supported (e4m3 only: fp16/bf16 x is quantized first)"
    if types.out_dtype not in OUT_DTYPES:
        return f"output dtype {types.out_dtype} is not supported ({'/'.join(OUT_DTYPES)})"
    return None


@dataclass(frozen=True, slots=True)
class Config(FamilyConfig):
    """CTA tile (``tile_k`` in e4m3 elements: 128 of them are 128 bytes, the 16-bit family's 64), cluster,
    schedule, raster swizzle and order; as many pipeline stages as fit, persistent data-parallel scheduler.
    ``fast_accum``: partial sums stay in the tensor cores' accumulators (CUTLASS's FP8FastAccum) rather than being
    promoted into separate fp32 registers every k-block."""

    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 128
    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = "cooperative"
    swizzle: int = 1
    raster: str = "heuristic"
    fast_accum: int = 1

    SPACE: ClassVar = {
        "tile_m": (64, 128, 256),
        "tile_n": (64, 128, 256),
        "tile_k": (128, 256),
        "cluster_m": (1, 2),
        "cluster_n": (1, 2),
        "schedule": ("cooperative", "pingpong"),
        "swizzle": (1, 2, 4, 8),
        "raster": ("heuristic", "m", "n"),
        "fast_accum": (0, 1),
    }


def smem_per_stage(cfg: Config) -> int:
    """Bytes of one pipeline stage: compressed A (half of K, 1 byte each), metadata (1 bit per element), B."""
    return cfg.tile_m * cfg.tile_k // 2 + cfg.tile_m * cfg.tile_k // 8 + cfg.tile_n * cfg.tile_k


class _Fp8Family(Family):
    name = "sptc24_fp8_sm90"
    arch = "sm_90a"
    weight = Sparse24FP8Weight
    Config = Config
    templates = ("families/sptc24_fp8_sm90/kernel.cu", "codegen/cutlass_emit.py", QUANTIZE_ROWS, SM90_PLAN)
    input_dtypes = ("e4m3",)

    def check(self, cfg: Config, problem: Problem) -> str | None:
        types = problem.types
        if (reason := fp8_types_rule(types)) is not None:
            return reason
        if (reason := schedule_rule(cfg)) is not None:
            return reason
        fit = (target().smem_per_block - EPILOGUE_SMEM) // smem_per_stage(cfg)
        if fit < 2:
            return f"2 stages of {smem_per_stage(cfg)} B do not fit in shared memory ({fit} fit)"
        if problem.k % K_MULTIPLE:
            return (f"in_features k={problem.k} must be a multiple of {K_MULTIPLE} for FP8 (TMA needs the "
                    "compressed rows 16-byte aligned)")
        if problem.n % 8:
            return f"out_features n={problem.n} must be a multiple of 8 for {types.out_dtype} output"
        if problem.m < 1:
            return "m must be >= 1"
        return None

    def source(self, cfg: Config, types: KernelTypes) -> str:
        from ...codegen.cutlass_emit import CPP_TYPES, emit_sm90, sm90_sparse_fp8_operation

        tile = (cfg.tile_m, cfg.tile_n, cfg.tile_k)
        op = sm90_sparse_fp8_operation(tile=tile, cluster=(cfg.cluster_m, cfg.cluster_n), schedule=cfg.schedule,
                                       out_dtype=types.out_dtype, fast_accum=bool(cfg.fast_accum))
        shape = "cute::Shape<" + ", ".join(f"cute::_{t}" for t in tile) + ">"
        return emit_sm90(op, self.template(self.templates[0]), tile_shape=shape,
                         element_d=CPP_TYPES[types.out_dtype], element_bias=CPP_TYPES[types.out_dtype],
                         has_bias="true" if types.bias else "false",
                         quantize_rows=package_file(QUANTIZE_ROWS).read_text(),
                         sm90_plan=package_file(SM90_PLAN).read_text())

    def heuristic(self, problem: Problem) -> Config:
        """The shipping grid's lesson (H200, 104 problems, m = 128-8192), with fast accumulation everywhere (up to
        2.7x the promoting mainloop, rel err <= 2.4e-3). m <= 32: 128x64x256, cluster 2x1; m <= 256: 128x64x256,
        raster n, swizzle 8. Above, 128x256x128 tiles, raster n, swizzle 8, unless they make under half a wave of
        CTAs: then 128x128x256."""
        if problem.m <= 32:
            return Config(tile_m=128, tile_n=64, tile_k=256, cluster_m=2, cluster_n=1)
        if problem.m <= 256:
            return Config(tile_m=128, tile_n=64, tile_k=256, raster="n", swizzle=8)
        if 2 * -(-problem.n // 128) * -(-problem.m // 256) < target().sm_count:
            return Config(tile_m=128, tile_n=128, tile_k=256)
        return Config(tile_m=128, tile_n=256, tile_k=128, raster="n", swizzle=8)

    def reference(self, x: torch.Tensor, w: Sparse24FP8Weight) -> torch.Tensor:
        """x·Wᵀ in fp64 of the dequantized operands (x is taken at scale 1: the tuner's inputs)."""
        return x.double() @ w.to_dense().double().T

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, helpers: Sequence[Callable] = ()) -> _Launcher:
        return _Launcher(lib, cfg)


class _Launcher:
    """A loaded FP8 kernel: ``launcher(x, w, bias, y, x_scale)`` on torch's current stream; x (m x k) is e4m3 and
    ``x_scale`` float32 of m entries (per token) or one (per tensor). ``steady`` gives matmul a 16-bit x's repeat:
    a plan that quantizes x and runs the GEMM in one call."""

    def __init__(self, lib: ctypes.CDLL, cfg: Config) -> None:
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        lib.cnm_run.argtypes = [vp, vp, vp, vp, vp, i32, vp, i32, vp, i32, i32, i32, i32, i32, i32, vp, vp]
        lib.cnm_run.restype = i32
        lib.cnm_meta_atom_k.restype = i32
        lib.cnm_quantize_rows.argtypes = [vp, vp, vp, i32, i32, i32, vp]
        lib.cnm_quantize_rows.restype = i32
        lib.cnm_plan_bytes.restype = ctypes.c_size_t
        lib.cnm_plan.argtypes = [vp, vp, vp, vp, vp, vp, i32, vp, vp, i32, i32, i32, i32, i32, i32, i32]
        lib.cnm_plan.restype = i32
        self.lib, self.run = lib, lib.cnm_run
        self.launch = gil_holding(lib, "cnm_launch", i32, vp, vp, vp, vp)
        self.plan_bytes = lib.cnm_plan_bytes()
        self.plans = Plans()  # (weight, bias, m, n, k, x dtype, stream) -> (plan, the stream's scratch it points into)
        self.quantize = functools.partial(quantize_with, lib.cnm_quantize_rows, FAMILY.name)
        self.swizzle, self.raster = cfg.swizzle, RASTER_ORDER[cfg.raster]
        atom = lib.cnm_meta_atom_k()
        self.layout_key = ("sm90_fp8", atom)
        self.build_layout = lambda w: meta_sm90.to_sm90(w, atom, 8)

    def __call__(self, x: torch.Tensor, w: Sparse24FP8Weight, bias: torch.Tensor | None, y: torch.Tensor,
                 x_scale: torch.Tensor) -> None:
        m, k = x.shape
        n = w.out_features
        e = w.layout(self.layout_key, self.build_layout)
        status = self.run(w.values.data_ptr(), e.data_ptr(), x.data_ptr(), y.data_ptr(), w.scale.data_ptr(), 1,
                          x_scale.data_ptr(), int(x_scale.numel() > 1), None if bias is None else bias.data_ptr(),
                          n, m, k, device_info(x.device).sm_count, self.swizzle, self.raster, None,
                          stream_of(x))
        if status:
            check_status(status, FAMILY.name, (m, n, k))

    def steady(self, x: torch.Tensor, w: Sparse24FP8Weight, bias: torch.Tensor | None, y: torch.Tensor
               ) -> Callable[..., None] | None:
        """After a first call on a 16-bit x (m x k): the repeat of (w, bias, m) on this stream, one C call that
        quantizes x into the stream's scratch and launches the GEMM from a plan; other streams take
        ``run_quantized``. Made outside graph capture (``matmul`` remembers no call made during one)."""
        m, k = x.shape
        n = w.out_features
        stream = stream_of(x)
        e = w.layout(self.layout_key, self.build_layout)
        key = (w.values.data_ptr(), e.data_ptr(), w.scale.data_ptr(), 0 if bias is None else bias.data_ptr(), m, n,
               k, x.dtype, stream)
        kept = self.plans.get(key)
        if kept is None:
            q_bytes = -(-m * k // 16) * 16
            scratch = workspace_buffer(x.device, q_bytes + 4 * m, stream)
            plan = ctypes.create_string_buffer(self.plan_bytes)
            status = self.lib.cnm_plan(plan, w.values.data_ptr(), e.data_ptr(), scratch.data_ptr(), y.data_ptr(),
                                       w.scale.data_ptr(), 1, scratch.data_ptr() + q_bytes,
                                       None if bias is None else bias.data_ptr(), n, m, k,
                                       device_info(x.device).sm_count, self.swizzle, self.raster,
                                       int(x.dtype == torch.bfloat16))
            check_status(status, FAMILY.name, (m, n, k))
            kept = self.plans.keep(key, (plan, scratch))
        plan, scratch = kept
        return steady_call(self.launch, plan, (w.values, e, w.scale, bias, scratch), FAMILY.name, (m, n, k),
                           on=(stream, functools.partial(run_quantized, self)))


def run_quantized(launcher: Callable[..., None], x: torch.Tensor, w: Any, bias: torch.Tensor | None,
                  y: torch.Tensor) -> None:
    """An FP8 GEMM ``launcher``'s call on a 16-bit x (m x k): x quantized per token into fresh tensors, then the
    launch on them (the per-call path of a repeat on another stream)."""
    xq, sx = launcher.quantize(x)
    launcher(xq, w, bias, y, sx)


def quantize_with(quantize_rows: Callable[..., int], family: str, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (m x k, fp16/bf16, contiguous) per token in one launch of a library's ``cnm_quantize_rows``: (e4m3 q,
    float32 scale per row), as ``formats.fp8.quantize_rows``."""
    m, k = x.shape
    q = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(m, dtype=torch.float32, device=x.device)
    status = quantize_rows(x.data_ptr(), q.data_ptr(), scale.data_ptr(), m, k, int(x.dtype == torch.bfloat16),
                           stream_of(x))
    if status:
        check_status(status, family, (m, 0, k))
    return q, scale


FAMILY = _Fp8Family()

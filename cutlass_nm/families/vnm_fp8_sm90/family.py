"""FP8 (e4m3) V:N:M on Hopper Sparse Tensor Cores: wgmma.sp e4m3 over the gathered 2:4 weight, fp32 accumulation,
scales fused in the epilogue: y = sx[token] * sw[channel] * (x_q[:, gathered] · W_qᵀ) (+ bias).

As ``vnm_sm90``, one CTA computes tile_m rows inside one V-block against tile_n tokens, with A (compressed e4m3
values) and E (metadata) by TMA. An 8-bit wgmma reads B K-major, so the producer gathers rows of xT (x transposed
once per call, tokens contiguous) into registers and transposes them into the K-major layout (``kernel.cu``).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from string import Template
from typing import ClassVar

import torch

from ...arch import HOPPER, target
from ...errors import ShapeError
from ...formats import meta_sm90
from ...formats.fp8 import VNMFP8Weight
from ...patterns import parse_or_none
from ..base import Family, FamilyConfig, KernelTypes, Problem, package_file
from ..launch import (
    Plans,
    call_scratch,
    check_status,
    gil_holding,
    packed_launch,
    steady_call,
    stream_of,
    workspace_buffer,
)
from ..sptc24_fp8_sm90.family import QUANTIZE_ROWS, fp8_types_rule, quantize_with, run_quantized
from ..vnm_sm90.family import GATHERED_TILES, K_ALIGN, gather_estimate_ms, gather_kernel_rule

TILE_K = 128  # gathered columns (bytes) per pipeline stage: one 128-byte swizzle row of B per token
TOKEN_ALIGN = 16  # xT's row length (ldx): m rounded up to whole 16-byte chunks
TEMPLATES = ("families/vnm_fp8_sm90/kernel.cu", "codegen/sparse_mainloop.cuh", QUANTIZE_ROWS, GATHERED_TILES)
ELEMENTS = {"f16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}


@dataclass(frozen=True, slots=True)
class Config(FamilyConfig):
    """CTA tile (tile_m rows of W inside one V-block, tile_n tokens; 128 gathered columns a stage), pipeline
    stages, consumer warpgroups (2 split tile_m = 128 in halves), the consumer mainloop (``mma_pipe`` 0: CUTLASS's
    sparse collective; 1: ours), the CTA order (``raster``, as vnm_sm90's) and CTAs per ``cluster`` along the
    tokens (2: A and E shared by multicast)."""

    tile_m: int = 128
    tile_n: int = 256
    stages: int = 4
    consumers: int = 2
    mma_pipe: int = 0
    raster: int = 1
    cluster: int = 1

    SPACE: ClassVar = {
        "tile_m": (64, 128),
        "tile_n": (64, 128, 256),
        "stages": (3, 4, 5),
        "consumers": (1, 2),
        "mma_pipe": (0, 1),
        "raster": (0, 1),
        "cluster": (1, 2),
    }

    def estimate_ms(self, problem: Problem, sm_count: int = HOPPER.sm_count) -> float:
        """Ranking estimate: vnm_sm90's ``gather_estimate_ms`` with 1-byte operands."""
        return gather_estimate_ms(self, problem, sm_count, 1, TILE_K, smem_per_stage(self))


def smem_per_stage(cfg: Config) -> int:
    """Bytes of one pipeline stage: compressed A (half of K, 1 byte each), metadata (1 bit per element), B."""
    return cfg.tile_m * TILE_K // 2 + cfg.tile_m * TILE_K // 8 + cfg.tile_n * TILE_K


def smem_bytes(cfg: Config) -> int:
    """The kernel's dynamic shared memory: the stages, their full and empty barriers (8 bytes each) and two k-tiles
    of gather indices, in a 1024-byte aligned block."""
    raw = cfg.stages * (smem_per_stage(cfg) + 16) + 2 * TILE_K * 4
    return -(-raw // 1024) * 1024


def kernel_layout(w: VNMFP8Weight, atom_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(e4m3 values n x kg/2, sm90 8-bit metadata, gather index blocks x kg int32 with -1 past the gathered
    columns)."""
    values, groups = w.padded_groups(K_ALIGN)
    return values, meta_sm90.from_groups(groups, w.gathered_k(K_ALIGN), atom_k, 8), \
        w.padded_gather_index(K_ALIGN, -1)


class _VnmFp8Family(Family):
    name = "vnm_fp8_sm90"
    arch = "sm_90a"
    weight = VNMFP8Weight
    Config = Config
    templates = TEMPLATES
    input_dtypes = ("e4m3",)

    def check(self, cfg: Config, problem: Problem) -> str | None:
        if (reason := fp8_types_rule(problem.types)) is not None:
            return reason
        if cfg.consumers == 2 and cfg.tile_m == 64:
            return "two consumer warpgroups split tile_m in halves of 64: tile_m must be 128"
        v = getattr(parse_or_none(problem.pattern), "v", None)
        if v and v % cfg.tile_m:
            return f"tile_m = {cfg.tile_m} rows must lie inside one V-block, got {problem.pattern}"
        return gather_kernel_rule(cfg, problem, smem_per_stage(cfg), smem_bytes(cfg), TOKEN_ALIGN)

    def source(self, cfg: Config, types: KernelTypes) -> str:
        c = type(cfg).from_record(cfg.to_record())  # only validated ints reach the source
        return Template(package_file(TEMPLATES[0]).read_text()).substitute(
            element_out=ELEMENTS[types.out_dtype], tile_m=int(c.tile_m), tile_n=int(c.tile_n), stages=int(c.stages),
            consumers=int(c.consumers), has_bias="true" if types.bias else "false", mma_pipe=int(c.mma_pipe),
            raster=int(c.raster), cluster=int(c.cluster), stage_bytes=smem_per_stage(c), smem_bytes=smem_bytes(c),
            sparse_mainloop=package_file(TEMPLATES[1]).read_text(),
            quantize_rows=package_file(TEMPLATES[2]).read_text(),
            gathered_tiles=package_file(GATHERED_TILES).read_text())

    def heuristic(self, problem: Problem) -> Config:
        """128 x 256 tiles on two consumer warpgroups (tile_m = 64 on one for V = 64 weights); 128 tokens wide
        where 256 would leave under a wave of CTAs."""
        v = getattr(parse_or_none(problem.pattern), "v", None) or 128
        tile_m = 128 if v % 128 == 0 else 64
        rows = -(-problem.n // tile_m)
        tile_n = 256 if rows * -(-problem.m // 256) >= target().sm_count else 128
        return Config(tile_m=tile_m, tile_n=tile_n, stages=4, consumers=2 if tile_m == 128 else 1)

    def reference(self, x: torch.Tensor, w: VNMFP8Weight) -> torch.Tensor:
        """x·Wᵀ in fp64 of the dequantized operands (x is taken at scale 1: the tuner's inputs)."""
        return x.double() @ w.to_dense().double().T

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, helpers: Sequence[Callable] = ()) -> _Launcher:
        return _Launcher(lib, cfg)


class QuantizedCall(ctypes.Structure):
    """The template's ``QuantizedCall``: a 16-bit x's plan and the scratch its quantization, transpose and GEMM use."""

    _fields_ = [("plan", ctypes.c_void_p), ("q", ctypes.c_void_p), ("scale", ctypes.c_void_p),
                ("xt", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("x_bf16", ctypes.c_int)]


class _Launcher:
    """A loaded kernel: ``launcher(x, w, bias, y, x_scale)`` on torch's current stream; x (m x k) is e4m3 and
    ``x_scale`` float32 of m entries (per token) or one (per tensor). Each (weight, m) runs from a plan built on
    its first call; each call transposes x into a scratch (the stream's workspace; its own under graph capture), then
    launches the GEMM. ``steady`` gives matmul a 16-bit x's repeat: quantization, transpose and GEMM in one C call."""

    def __init__(self, lib: ctypes.CDLL, cfg: Config) -> None:
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        lib.cnm_meta_atom_k.restype = i32
        lib.cnm_plan_bytes.restype = ctypes.c_size_t
        lib.cnm_plan.argtypes = [vp, vp, vp, vp, vp, vp] + [i32] * 7
        lib.cnm_plan.restype = i32
        lib.cnm_quantize_rows.argtypes = [vp, vp, vp, i32, i32, i32, vp]
        lib.cnm_quantize_rows.restype = i32
        self.lib, self.cfg = lib, cfg
        self.launch = gil_holding(lib, "cnm_launch", i32, vp, vp, vp, vp, i32, vp, vp, vp)
        self.launch_quantized = packed_launch(lib, QuantizedCall, FAMILY.name, "cnm_launch_quantized")
        self.plans = Plans()
        atom = lib.cnm_meta_atom_k()
        self.layout_key = ("vnm_fp8_sm90", atom)
        self.build_layout = functools.partial(kernel_layout, atom_k=atom)
        self.quantize = functools.partial(quantize_with, lib.cnm_quantize_rows, FAMILY.name)

    def __call__(self, x: torch.Tensor, w: VNMFP8Weight, bias: torch.Tensor | None, y: torch.Tensor,
                 x_scale: torch.Tensor) -> None:
        m, k = x.shape
        xt_bytes = _xt_bytes(m, w)
        xt = call_scratch(x.device, xt_bytes)
        plan = self._plan_for(x, w, xt.data_ptr())
        status = self.launch(plan, x.data_ptr(), xt.data_ptr(), x_scale.data_ptr(), int(x_scale.numel() > 1),
                             y.data_ptr(), None if bias is None else bias.data_ptr(), stream_of(x))
        if status:
            check_status(status, FAMILY.name, (m, w.out_features, k))

    def steady(self, x: torch.Tensor, w: VNMFP8Weight, bias: torch.Tensor | None, y: torch.Tensor
               ) -> Callable[..., None] | None:
        """After a first call on a 16-bit x (m x k): its repeat on this stream, one C call that quantizes x into the
        stream's scratch, transposes it and runs the GEMM from the plan; other streams take ``run_quantized``. Made
        outside graph capture (``matmul`` remembers no call made during one)."""
        m, k = x.shape
        stream = stream_of(x)
        q_at = _aligned(_xt_bytes(m, w))
        scale_at = q_at + _aligned(m * k)
        scratch = workspace_buffer(x.device, scale_at + 4 * m, stream)
        base = scratch.data_ptr()
        plan = self._plan_for(x, w, base)
        call = QuantizedCall(ctypes.addressof(plan), base + q_at, base + scale_at, base,
                             None if bias is None else bias.data_ptr(), int(x.dtype == torch.bfloat16))
        values, e, gidx = w.layout(self.layout_key, self.build_layout)
        return steady_call(self.launch_quantized, ctypes.addressof(call),
                           (call, plan, values, e, gidx, w.scale, bias, scratch), FAMILY.name,
                           (m, w.out_features, k), on=(stream, functools.partial(run_quantized, self)))

    def _plan_for(self, x: torch.Tensor, w: VNMFP8Weight, xt: int) -> ctypes.Array:
        """The plan of (w, x's m), built on first use (``xt``: an xT scratch's address, which shapes B's TMA
        descriptor; the producer loads B itself, from the address each launch passes)."""
        v = w.pattern.v
        if v % self.cfg.tile_m:
            raise ShapeError(f"vnm_fp8_sm90 with tile_m={self.cfg.tile_m} needs V % tile_m == 0, got V={v}")
        m, k = x.shape
        values, e, gidx = w.layout(self.layout_key, self.build_layout)
        key = (values.data_ptr(), e.data_ptr(), gidx.data_ptr(), w.scale.data_ptr(), m, w.out_features, k,
               w.padded_k, gidx.shape[1], v)
        plan = self.plans.get(key)
        if plan is None:
            plan = ctypes.create_string_buffer(self.lib.cnm_plan_bytes())
            check_status(self.lib.cnm_plan(plan, *key[:4], xt, w.out_features, m, k, w.padded_k, _ldx(m),
                                           gidx.shape[1], v), FAMILY.name, (m, w.out_features, k))
            self.plans.keep(key, plan)
        return plan


def _ldx(m: int) -> int:
    """xT's row length for m tokens: whole 16-byte chunks."""
    return -(-m // TOKEN_ALIGN) * TOKEN_ALIGN


def _xt_bytes(m: int, w: VNMFP8Weight) -> int:
    """Bytes of x's transpose (padded_k x ldx e4m3)."""
    return w.padded_k * _ldx(m)


def _aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to whole 16-byte chunks (TMA and vector loads)."""
    return -(-nbytes // 16) * 16


FAMILY = _VnmFp8Family()

"""V:N:M (VENOM) on Hopper Sparse Tensor Cores: wgmma.sp over the gathered 2:4 weight, B rows gathered per CTA.

y = x·Wᵀ is, per V-block b of W's rows, ``x[:, gather_index[b]] · Wg[rows of b]ᵀ`` with Wg = ``w.gathered_24()``.
The kernel (``kernel.cu``) runs Dᵀ = Wg · Bg with one CTA per (tile_m rows inside one V-block, tile_n tokens): A
(compressed values) and E (metadata) by TMA, B by 16-byte cp.async from xT (x transposed once per call,
token-contiguous) at the rows the block's gather index names.
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
from ...formats.vnm import VNMWeight
from ...patterns import parse_or_none
from ..base import Family, FamilyConfig, KernelTypes, Problem, half_inputs_only, package_file, pipelined_mma_rule
from ..launch import Plans, check_status, gil_holding, packed_launch, steady_call, stream_of, workspace_buffer

MAX_ACC_PER_THREAD = 128  # fp32 accumulators per consumer thread before spilling
K_ALIGN = 128  # gathered K is padded to this (a multiple of every tile_k), zero values / valid metadata
GATHERED_TILES = "codegen/gathered_tiles.cuh"  # CTA order, launch and plan, shared with vnm_fp8_sm90's kernel
TEMPLATES = ("families/vnm_sm90/kernel.cu", "codegen/sparse_mainloop.cuh", GATHERED_TILES)  # kernel and fragments
ELEMENTS = {"f16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t", "f32": "float"}


@dataclass(frozen=True, slots=True)
class Config(FamilyConfig):
    """CTA tile (tile_m rows of W inside one V-block, tile_n tokens, tile_k gathered columns), pipeline stages,
    consumer warpgroups (2 split tile_m = 128 in halves, or run tile_m = 256 as two 128-row MMA tiles), the
    consumer mainloop (``mma_pipe`` 0: CUTLASS's sparse collective; 1: ours, one wgmma.sp batch kept in flight),
    the CTA order (``raster`` 0: weight tiles fastest; 1: token tiles in L2-sized groups, each weight tile with its
    group's token tiles in a row) and the CTAs per ``cluster`` along the tokens (2: A and E shared by multicast)."""

    tile_m: int = 64
    tile_n: int = 128
    tile_k: int = 64
    stages: int = 4
    consumers: int = 1
    mma_pipe: int = 0
    raster: int = 0
    cluster: int = 1

    SPACE: ClassVar = {
        "tile_m": (64, 128, 256),
        "tile_n": (64, 128, 256),
        "tile_k": (64, 128),
        "stages": (2, 3, 4, 5, 6, 7, 8),
        "consumers": (1, 2),
        "mma_pipe": (0, 1),
        "raster": (0, 1),
        "cluster": (1, 2),
    }

    def estimate_ms(self, problem: Problem, sm_count: int = HOPPER.sm_count) -> float:
        """Ranking estimate (families.perfmodel): :func:`gather_estimate_ms` with 16-bit operands."""
        return gather_estimate_ms(self, problem, sm_count, 2, self.tile_k, smem_per_stage(self))


def gather_estimate_ms(cfg: FamilyConfig, problem: Problem, sm_count: int, elem_bytes: int, tile_k: int,
                       stage_bytes: int) -> float:
    """The ranking estimate of a gathered-B sm90 kernel (this family's, ``vnm_fp8_sm90``'s) with ``elem_bytes``-byte
    operands: the gathered B (once per weight tile) and A with its metadata (once per token tile, once per cluster)
    through L2, at a rate that falls below ~128 KB of stages in flight, or CTA waves of wgmma.sp over the gathered
    K (twice the 16-bit rate for 1-byte operands), whichever is larger; short K loops pay the pipeline fill."""
    group = getattr(parse_or_none(problem.pattern), "m", 8)
    m, n, k = problem.m, problem.n, problem.k
    kg = -(-4 * -(-k // group) // K_ALIGN) * K_ALIGN
    rows = -(-n // cfg.tile_m)
    tiles_n = -(-m // cfg.tile_n)
    toks = -(-tiles_n // cfg.cluster) * cfg.cluster  # padded to whole clusters
    traffic = (rows * toks * cfg.tile_n * kg * elem_bytes + toks * n * kg * (elem_bytes / 2 + 1 / 8) / cfg.cluster
               + m * n * 2)
    in_flight = (cfg.stages - 1) * stage_bytes
    rate = HOPPER.l2_bandwidth * min(1.0, in_flight / 128e3)
    flops = HOPPER.sparse_flops * (2 / elem_bytes) / sm_count
    mma = -(-rows * toks // sm_count) * 2.0 * cfg.tile_m * cfg.tile_n * kg / flops
    return max(traffic / rate, mma) * (1 + 8 / (kg / tile_k + 8)) * 1e3


def emit(cfg: Config, types: KernelTypes, glu: bool) -> str:
    """The kernel source for ``cfg`` (plain epilogue, or ``glu``: the SwiGLU epilogue of ``vnm_glu_sm90``). The
    shared-memory sizes this module plans with go in too: the template static_asserts its own equal them."""
    c = type(cfg).from_record(cfg.to_record())  # only validated ints reach the source
    return Template(package_file(TEMPLATES[0]).read_text()).substitute(
        element=ELEMENTS[types.dtype], element_out=ELEMENTS[types.out_dtype], tile_m=int(c.tile_m),
        tile_n=int(c.tile_n), tile_k=int(c.tile_k), stages=int(c.stages), consumers=int(c.consumers),
        has_bias="true" if types.bias else "false", mma_pipe=int(c.mma_pipe), raster=int(c.raster),
        cluster=int(c.cluster), glu=1 if glu else 0, stage_bytes=smem_per_stage(c), smem_bytes=smem_bytes(c),
        sparse_mainloop=package_file(TEMPLATES[1]).read_text(), gathered_tiles=package_file(GATHERED_TILES).read_text())


def gather_kernel_rule(cfg: FamilyConfig, problem: Problem, stage_bytes: int, smem: int, token_align: int
                       ) -> str | None:
    """The rules every gathered-B sm90 kernel (this family's, ``vnm_fp8_sm90``'s) shares, for a config with
    tile_m, tile_n, stages, consumers, mma_pipe, raster and cluster: accumulators per thread, shared memory
    (``smem`` bytes, ``stage_bytes`` a stage), the pipelined mainloop's stages, the launch grid and the 32-bit
    offsets into xT (rows of m rounded up to ``token_align``)."""
    acc = cfg.tile_m * cfg.tile_n // (128 * cfg.consumers)
    if acc > MAX_ACC_PER_THREAD:
        return f"{cfg.tile_m}x{cfg.tile_n} over {cfg.consumers} warpgroup(s) needs {acc} > " \
               f"{MAX_ACC_PER_THREAD} accumulators per thread"
    if smem > (cap := target().smem_per_block):
        return f"{cfg.stages} stages of {stage_bytes} B do not fit in {cap} B of shared memory"
    if (reason := pipelined_mma_rule(cfg.mma_pipe, cfg.stages)) is not None:
        return reason
    if problem.m < 1 or problem.n < 1 or problem.k < 1:
        return "m, n, k must be >= 1"
    token_tiles = -(-problem.m // cfg.tile_n)
    if cfg.cluster > 1 and cfg.raster == 1 and -(-problem.n // cfg.tile_m) * token_tiles > 65535 * cfg.cluster:
        return f"cluster={cfg.cluster} with raster=1 launches at most {65535 * cfg.cluster} CTAs"
    if token_tiles > 65535:
        return f"at most 65535 token tiles of {cfg.tile_n}"
    if (problem.k + K_ALIGN) * (-(-problem.m // token_align) * token_align) >= 2**31:
        return "the gather addresses the transposed x with 32-bit offsets: k * m must stay below 2^31"
    return None


def smem_per_stage(cfg: Config) -> int:
    """Bytes of one pipeline stage: compressed A (half of K, 16-bit), metadata (2 bits per kept value), gathered B
    (16-bit)."""
    return cfg.tile_m * cfg.tile_k + cfg.tile_m * cfg.tile_k // 8 + cfg.tile_n * cfg.tile_k * 2


def smem_bytes(cfg: Config) -> int:
    """The kernel's dynamic shared memory: the stages, their full and empty barriers (8 bytes each) and two k-tiles
    of gather indices, in a 1024-byte aligned block."""
    raw = cfg.stages * (smem_per_stage(cfg) + 16) + 2 * cfg.tile_k * 4
    return -(-raw // 1024) * 1024


def gathered_k(w: VNMWeight) -> int:
    """The gathered K the kernels run: 4·groups padded to ``K_ALIGN``."""
    return w.gathered_k(K_ALIGN)


def kernel_layout(w: VNMWeight, atom_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(values n x kg/2, sm90 metadata, gather index blocks x kg int32 with -1 past the gathered columns)."""
    values, groups = w.padded_groups(K_ALIGN)
    return values, meta_sm90.from_groups(groups, gathered_k(w), atom_k), w.padded_gather_index(K_ALIGN, -1)


class _VnmSm90Family(Family):
    name = "vnm_sm90"
    arch = "sm_90a"
    weight = VNMWeight
    Config = Config
    templates = TEMPLATES

    def check(self, cfg: Config, problem: Problem) -> str | None:
        if (reason := half_inputs_only(problem.types)) is not None:
            return reason
        if cfg.consumers == 2 and cfg.tile_m == 64:
            return "two consumer warpgroups split tile_m in halves of 64: tile_m must be 128 or 256"
        if cfg.tile_m == 256 and cfg.consumers != 2:
            return "tile_m = 256 runs on two consumer warpgroups (consumers=2)"
        if cfg.tile_m == 256 and (getattr(parse_or_none(problem.pattern), "v", None) or 0) % 256:
            return f"tile_m = 256 tiles 256-row V-blocks (fused gate/up weights), got {problem.pattern}"
        return gather_kernel_rule(cfg, problem, smem_per_stage(cfg), smem_bytes(cfg), 8)

    def source(self, cfg: Config, types: KernelTypes) -> str:
        return emit(cfg, types, glu=False)

    def heuristic(self, problem: Problem) -> Config:
        """The shipping grid's lesson (H200, 104 problems, m = 128-8192): m <= 64: a 64x64x128 tile, 6 stages;
        m <= 128: 128x64x128, 5 stages, 2 consumers. Above, 128x256x64, 5 stages, 2 consumers while that tile
        makes >= 3 waves of CTAs (``raster`` = 1 where the weight tiles outnumber half the SMs), else 128x128x128,
        4 stages, while that makes >= a quarter wave, else 128x64x128. The choice does not depend on V (parsed from
        ``problem.pattern``): under a tile_m = 128 config a V = 64 weight runs on the config's tile_m = 64 twin
        (:meth:`helpers`)."""
        if problem.m <= 64:
            return Config(tile_m=64, tile_n=64, tile_k=128, stages=6)
        narrow = Config(tile_m=128, tile_n=64, tile_k=128, stages=5, consumers=2)
        if problem.m <= 128:
            return narrow
        sms = target().sm_count
        row_tiles = -(-problem.n // 128)
        if row_tiles * -(-problem.m // 256) >= 3 * sms:
            return Config(tile_m=128, tile_n=256, tile_k=64, stages=5, consumers=2, raster=int(2 * row_tiles > sms))
        if 4 * row_tiles * -(-problem.m // 128) >= sms:
            return Config(tile_m=128, tile_n=128, tile_k=128, stages=4, consumers=2)
        return narrow

    def helpers(self, cfg: Config, types: KernelTypes) -> list[tuple[str, Config, KernelTypes]]:
        """A tile wider than 64 rows runs V = 64 weights on its tile_m = 64 twin: that kernel's id."""
        return [(self.name, fallback_config(cfg), types)] if cfg.tile_m > 64 else []

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, helpers: Sequence[Callable] = ()) -> _Launcher:
        return _Launcher(lib, cfg, types, *helpers)


def fallback_config(cfg: Config) -> Config:
    """The tile_m = 64 config a wider kernel hands V = 64 weights to: the same tile on one consumer warpgroup
    where that fits, else 64x256x64, 5 stages (CUTLASS's mainloop, no cluster, the same raster)."""
    same = Config(tile_m=64, tile_n=cfg.tile_n, tile_k=cfg.tile_k, stages=cfg.stages, consumers=1, raster=cfg.raster)
    probe = Problem(cfg.tile_n, 64, 64, KernelTypes("f16", "f16", False))  # the rules that do not depend on a shape
    return same if FAMILY.check(same, probe) is None else Config(tile_m=64, tile_n=256, tile_k=64, stages=5,
                                                                 raster=cfg.raster)


class RepeatArgs(ctypes.Structure):
    """The template's ``RepeatArgs``: a remembered call's plan, transpose scratch and bias."""

    _fields_ = [("plan", ctypes.c_void_p), ("xt", ctypes.c_void_p), ("bias", ctypes.c_void_p)]


class _Launcher:
    """A loaded vnm_sm90 kernel: ``launcher(x, w, bias, y)`` on torch's current stream.

    Each (weight, m) runs from a plan: the kernel's parameters, with the TMA descriptors of the weight's values and
    metadata, built on its first call; later calls pass only x, xt, y and bias."""

    def __init__(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, twin: Callable | None = None) -> None:
        """``twin``: the launcher of :func:`fallback_config`'s kernel, which runs V = 64 weights for a wider tile."""
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        lib.cnm_meta_atom_k.restype = i32
        lib.cnm_transpose.argtypes = [vp, vp, i32, i32, i32, i32, vp]
        lib.cnm_transpose.restype = i32
        lib.cnm_plan_bytes.restype = ctypes.c_size_t
        lib.cnm_plan.argtypes = [vp, vp, vp, vp, vp] + [i32] * 7
        lib.cnm_plan.restype = i32
        self.lib, self.cfg, self.types = lib, cfg, types
        self.launch = gil_holding(lib, "cnm_launch", i32, vp, vp, vp, vp, vp, vp)
        self.repeat = packed_launch(lib, RepeatArgs, FAMILY.name, "cnm_repeat")
        self.plans = Plans()
        self.transpose_only = lib.cnm_transpose
        self.atom = lib.cnm_meta_atom_k()
        self.layout_key = ("vnm_sm90", self.atom)
        self.build_layout = functools.partial(kernel_layout, atom_k=self.atom)
        self.twin = twin

    def __call__(self, x: torch.Tensor, w: VNMWeight, bias: torch.Tensor | None, y: torch.Tensor,
                 xt: torch.Tensor | None = None) -> None:
        """Write x·Wᵀ (+ bias) into y (m x n, contiguous). With ``xt``, x only gives the shape: the kernel gathers
        from xt, which already holds x transposed, and skips its own transpose."""
        v = w.pattern.v
        if v % self.cfg.tile_m:
            if v % 64 == 0 and self.twin is not None:  # a V = 64 weight under a wider tile: the tile_m = 64 twin
                self.twin(x, w, bias, y, xt)
                return
            raise ShapeError(f"vnm_sm90 with tile_m={self.cfg.tile_m} needs V % tile_m == 0, got V={v} "
                             "(Hopper's sparse MMA tiles are 64 rows: V >= 64)")
        m, k = x.shape
        values, e, gidx = w.layout(self.layout_key, self.build_layout)
        ldx = -(-m // 8) * 8
        given = xt is not None
        if given and (xt.shape != (w.padded_k, ldx) or xt.dtype != x.dtype or not xt.is_contiguous()):
            raise ShapeError(f"xt must be a contiguous {x.dtype} ({w.padded_k}, {ldx}) tensor, got "
                             f"{xt.dtype} {tuple(xt.shape)}")
        if not given:
            xt = torch.empty(w.padded_k, ldx, dtype=x.dtype, device=x.device)  # x transposed by the library
        key = self._key(m, w, values, e, gidx)
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans.keep(key, self._plan(key, ldx, xt))
        status = self.launch(plan, None if given else x.data_ptr(), xt.data_ptr(), y.data_ptr(),
                             None if bias is None else bias.data_ptr(), stream_of(x))
        if status:
            check_status(status, FAMILY.name, (m, w.out_features, k))

    def steady(self, x: torch.Tensor, w: VNMWeight, bias: torch.Tensor | None, y: torch.Tensor
               ) -> Callable[..., None]:
        """After a first call on (x, w, bias): its plan's launch with x transposed into the scratch of this call's
        stream, packed once (``cnm_repeat``), for matmul to repeat; another stream, or a capture, takes the launcher."""
        if w.pattern.v % self.cfg.tile_m:
            return self.twin.steady(x, w, bias, y) if self.twin is not None else self
        m, k = x.shape
        values, e, gidx = w.layout(self.layout_key, self.build_layout)
        plan = self.plans.get(self._key(m, w, values, e, gidx))
        if plan is None:
            return self
        home = stream_of(x)
        xt = workspace_buffer(x.device, w.padded_k * (-(-m // 8) * 8) * x.element_size(), home)
        args = RepeatArgs(ctypes.addressof(plan), xt.data_ptr(), None if bias is None else bias.data_ptr())
        return steady_call(self.repeat, ctypes.addressof(args), (args, plan, values, e, gidx, bias, xt), FAMILY.name,
                           (m, w.out_features, k), on=(home, self))

    @staticmethod
    def _key(m: int, w: VNMWeight, values: torch.Tensor, e: torch.Tensor, gidx: torch.Tensor) -> tuple[int, ...]:
        """The plan key of a call on m tokens of w through its layout (values, metadata, gather index)."""
        return (values.data_ptr(), e.data_ptr(), gidx.data_ptr(), m, w.out_features, w.in_features, w.padded_k,
                gidx.shape[1], w.pattern.v)

    def _plan(self, key: tuple[int, ...], ldx: int, xt: torch.Tensor) -> ctypes.Array:
        a, e, gidx, m, n, k, padded_k, kg, v = key
        plan = ctypes.create_string_buffer(self.lib.cnm_plan_bytes())
        check_status(self.lib.cnm_plan(plan, a, e, gidx, xt.data_ptr(), n, m, k, padded_k, ldx, kg, v),
                     FAMILY.name, (m, n, k))
        return plan

    def transpose(self, x: torch.Tensor, padded_k: int, xt: torch.Tensor) -> None:
        """Only the per-call transpose into xt (padded_k x ldx), for profiling."""
        m, k = x.shape
        stream = stream_of(x)
        status = self.transpose_only(x.data_ptr(), xt.data_ptr(), m, k, padded_k, xt.shape[1], stream)
        check_status(status, FAMILY.name, (m, 0, k))


FAMILY = _VnmSm90Family()

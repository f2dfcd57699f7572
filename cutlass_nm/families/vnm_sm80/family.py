"""V:N:M (VENOM) on Ampere Sparse Tensor Cores: mma.sp m16n8k32 over the gathered 2:4 weight; runs on sm_80+.

y = x·Wᵀ is, per V-block b of W's rows, ``x[:, gather_index[b]] · Wg[rows of b]ᵀ`` with Wg = ``w.gathered_24()``.
The kernel (``kernel.cu``) runs Dᵀ = Wg · Bg with one CTA per (tile_m rows inside one V-block, tile_n
tokens) on CUTLASS 2.x's sparse multistage mainloop (cp.async stages, mma.sp, sm80 metadata iterator); B is read
from xT (x transposed once per call, token-contiguous rows) by CUTLASS's predicated tile iterator in gather mode,
whose K coordinate goes through the CTA's V-block row of the gather index. The epilogue writes y row-major
directly (bias, conversion, tails). Gathered K is padded to ``K_ALIGN`` with zero values, valid metadata and
index entries that point at a zero row appended to xT.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...arch import ARCHS, HOPPER
from ...errors import ShapeError
from ...formats import meta_sm80
from ...formats.vnm import VNMWeight
from ...patterns import Pattern, parse_or_none
from ..base import Family, FamilyConfig, KernelTypes, Problem, half_inputs_only
from ..launch import call_scratch, check_status, packed_launch, steady_call, stream_of, torch_dtype
from ..sptc24_sm80.family import TILE_SHAPES

SMEM_BYTES = ARCHS["sm_80"].smem_per_block  # the family targets sm_80 (and runs on sm_90)
K_ALIGN = 128  # gathered K padded to this: a multiple of every tile_k and of the metadata's column padding
ELEMENTS = {"f16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t", "f32": "float"}
# (tile_m, tile_n, tile_k) -> (warp_m, warp_n): CUTLASS's instantiated 16-bit sparse shapes with tile_m | V
# (64 or 128).
SHAPES: dict[tuple[int, int, int], tuple[int, int]] = {t: w for t, w in TILE_SHAPES.items() if t[0] <= 128}


@dataclass(frozen=True, slots=True)
class Config(FamilyConfig):
    """CTA tile (tile_m rows of W inside one V-block, tile_n tokens, tile_k gathered columns), warp tile,
    cp.async stages, threadblock swizzle (CUTLASS's identity swizzle width)."""

    tile_m: int = 64
    tile_n: int = 128
    tile_k: int = 64
    warp_m: int = 32
    warp_n: int = 64
    stages: int = 4
    swizzle: int = 1

    SPACE: ClassVar = {
        "tile_m": (64, 128),
        "tile_n": (64, 128, 256),
        "tile_k": (64, 128),
        "warp_m": (32, 64),
        "warp_n": (32, 64),
        "stages": (2, 3, 4, 5, 6),
        "swizzle": (1, 2, 4, 8),
    }

    def estimate_ms(self, problem: Problem, sm_count: int = HOPPER.sm_count) -> float:
        """Ranking estimate (families.perfmodel): the gathered operands' L2 -> SM traffic (B once per row tile, A once
        per token tile) at a rate that grows with the bytes an SM keeps in flight (stages - 1 per resident CTA) up
        to the 4.35 TB/s vnm_sm80 reached on the H100, or CTA waves of mma.sp, whichever is larger."""
        v = _block_rows(problem)
        pattern_m = Pattern.parse(problem.pattern).m if v is not None else 8
        m, n, k = problem.m, problem.n, problem.k
        kg = -(-4 * -(-k // pattern_m) // K_ALIGN) * K_ALIGN
        stage = smem_per_stage(self)
        threads = 32 * (self.tile_m // self.warp_m) * (self.tile_n // self.warp_n)
        regs = min(255, 64 + 2 * self.warp_m * self.warp_n // 32)
        resident = max(1, min(HOPPER.smem_per_sm // (self.stages * stage), HOPPER.regs_per_sm // (threads * regs)))
        in_flight_kb = resident * (self.stages - 1) * stage / 1024
        rate = min(4.35e12, 4.35e12 * in_flight_kb / 154)
        rows, toks = -(-n // self.tile_m), -(-m // self.tile_n)
        traffic = rows * -(-m // 8) * 8 * kg * 2 + toks * n * kg * (1 + 1 / 8) + m * n * 2 + 4 * m * k
        waves = -(-rows * toks // (sm_count * resident)) * resident
        mma = waves * self.tile_m * self.tile_n * kg / (HOPPER.sparse_flops / sm_count)  # 2 x MACs at half density
        return max(traffic / rate, mma) * (1 + 8 / (kg / self.tile_k + 8)) * 1e3


def smem_per_stage(cfg: Config) -> int:
    """Compressed A (half of K, 16-bit), metadata (2 bits per kept value), gathered B (16-bit)."""
    return cfg.tile_m * cfg.tile_k + cfg.tile_m * cfg.tile_k // 8 + cfg.tile_n * cfg.tile_k * 2


def gathered_k(w: VNMWeight) -> int:
    """The gathered K the kernels run: 4·groups padded to ``K_ALIGN``."""
    return w.gathered_k(K_ALIGN)


def kernel_layout(w: VNMWeight) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(values n x kg/2, sm80 metadata, gather index blocks x kg int32, metadata rows). Index entries past the
    gathered columns name row ``padded_k`` of xT, which the kernel fills with zeros."""
    values, groups = w.padded_groups(K_ALIGN)
    kg = gathered_k(w)
    e_rows = meta_sm80.padded_shape(w.out_features, kg)[0]
    return values, meta_sm80.from_groups(groups, kg), w.padded_gather_index(K_ALIGN, w.padded_k), e_rows


class _VnmSm80Family(Family):
    name = "vnm_sm80"
    arch = "sm_80"
    weight = VNMWeight
    Config = Config
    templates = ("families/vnm_sm80/kernel.cu",)

    def check(self, cfg: Config, problem: Problem) -> str | None:
        if (reason := half_inputs_only(problem.types)) is not None:
            return reason
        if SHAPES.get((cfg.tile_m, cfg.tile_n, cfg.tile_k)) != (cfg.warp_m, cfg.warp_n):
            return f"tile {cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k} with warp {cfg.warp_m}x{cfg.warp_n} is not " \
                   "instantiated"
        if cfg.stages * smem_per_stage(cfg) > SMEM_BYTES:
            return f"{cfg.stages} stages of {smem_per_stage(cfg)} B exceed {SMEM_BYTES} B of shared memory"
        if problem.m < 1 or problem.n < 1 or problem.k < 1:
            return "m, n, k must be >= 1"
        v = _block_rows(problem)
        if v is not None and v % cfg.tile_m:
            return f"tile_m={cfg.tile_m} must divide V={v} (one CTA reads one V-block's gather index)"
        return None

    def source(self, cfg: Config, types: KernelTypes) -> str:
        c = Config.from_record(cfg.to_record())  # only validated ints reach the source
        return self.template("families/vnm_sm80/kernel.cu").substitute(
            element=ELEMENTS[types.dtype], element_out=ELEMENTS[types.out_dtype], tile_m=int(c.tile_m),
            tile_n=int(c.tile_n), tile_k=int(c.tile_k), warp_m=int(c.warp_m), warp_n=int(c.warp_n),
            stages=int(c.stages), swizzle=int(c.swizzle), has_bias="true" if types.bias else "false")

    def heuristic(self, problem: Problem) -> Config:
        """m <= 64: a 64x64x128 tile. Else 128x128x64, 4 stages, 64x64 warps, or its tile_m = 64 twin where
        ``problem.pattern`` names V = 64 (a V = 64 weight under a tile_m = 128 kernel also runs on the twin)."""
        if problem.m <= 64:
            return Config(tile_m=64, tile_n=64, tile_k=128, warp_m=32, warp_n=32, stages=4)
        cfg = Config(tile_m=128, tile_n=128, tile_k=64, warp_m=64, warp_n=64, stages=4)
        v = _block_rows(problem)
        return fallback_config(cfg) if v is not None and v % 128 else cfg

    def helpers(self, cfg: Config, types: KernelTypes) -> list[tuple[str, Config, KernelTypes]]:
        """A tile_m = 128 kernel runs V = 64 weights on its tile_m = 64 twin: that kernel's id."""
        return [(self.name, fallback_config(cfg), types)] if cfg.tile_m > 64 else []

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, helpers: Sequence[Callable] = ()) -> _Launcher:
        return _Launcher(lib, cfg, types, *helpers)


def _block_rows(problem: Problem) -> int | None:
    """V of the problem's weight pattern; None when the problem does not name a V:N:M pattern."""
    return getattr(parse_or_none(problem.pattern), "v", None)


def fallback_config(cfg: Config) -> Config:
    """The tile_m = 64 config a tile_m = 128 kernel hands V = 64 weights to (same tile_n, tile_k, stages)."""
    for (tm, tn, tk), (wm, wn) in SHAPES.items():
        if tm == 64 and tn == cfg.tile_n and tk == cfg.tile_k:
            return Config(tile_m=64, tile_n=tn, tile_k=tk, warp_m=wm, warp_n=wn, stages=cfg.stages,
                          swizzle=cfg.swizzle)
    raise AssertionError("every tile_n/tile_k pair has a tile_m = 64 shape")


class RunArgs(ctypes.Structure):
    """The template's ``RunArgs``: ``cnm_run``'s arguments but x, y and the stream."""

    _fields_ = [("a", ctypes.c_void_p), ("e", ctypes.c_void_p), ("gidx", ctypes.c_void_p), ("bias", ctypes.c_void_p),
                ("xt", ctypes.c_void_p)] + [
        (name, ctypes.c_int) for name in ("n", "m", "k", "padded_k", "ldx", "kg", "e_rows", "v")]


class _Launcher:
    """A loaded vnm_sm80 kernel: ``launcher(x, w, bias, y)`` on torch's current stream. One C call transposes x into
    a scratch (the stream's workspace; the graph's pool under capture) and runs the GEMM; ``steady`` packs every
    argument but x, y and the stream once."""

    def __init__(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, twin: Callable | None = None) -> None:
        """``twin``: the launcher of :func:`fallback_config`'s kernel, which runs V = 64 weights for tile_m = 128."""
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        lib.cnm_run.argtypes = [vp, vp, vp, vp, vp, vp, vp, i32, i32, i32, i32, i32, i32, i32, i32, vp]
        lib.cnm_run.restype = i32
        self.run, self.cfg, self.types, self.twin = lib.cnm_run, cfg, types, twin
        self.launch = packed_launch(lib, RunArgs, FAMILY.name)
        self.itemsize = torch_dtype(types.dtype).itemsize

    def __call__(self, x: torch.Tensor, w: VNMWeight, bias: torch.Tensor | None, y: torch.Tensor) -> None:
        """Write x·Wᵀ (+ bias) into y (m x n, contiguous)."""
        if (twin := self._twin_for(w)) is not None:
            twin(x, w, bias, y)
            return
        m, k = x.shape
        n = w.out_features
        (values, e, gidx, e_rows), ldx, xt = self._operands(x, w)
        status = self.run(values.data_ptr(), e.data_ptr(), gidx.data_ptr(), x.data_ptr(), xt.data_ptr(), y.data_ptr(),
                          None if bias is None else bias.data_ptr(), n, m, k, w.padded_k, ldx, gidx.shape[1], e_rows,
                          w.pattern.v, stream_of(x))
        check_status(status, FAMILY.name, (m, n, k))

    def steady(self, x: torch.Tensor, w: VNMWeight, bias: torch.Tensor | None, y: torch.Tensor
               ) -> Callable[..., None]:
        """After a first call on (x, w, bias): its launch with every argument but x, y and the stream packed once,
        the transpose scratch the workspace of this call's stream (calls on another stream take the launcher)."""
        if (twin := self._twin_for(w)) is not None:
            return twin.steady(x, w, bias, y)
        m, k = x.shape
        (values, e, gidx, e_rows), ldx, xt = self._operands(x, w)
        args = RunArgs(values.data_ptr(), e.data_ptr(), gidx.data_ptr(), None if bias is None else bias.data_ptr(),
                       xt.data_ptr(), w.out_features, m, k, w.padded_k, ldx, gidx.shape[1], e_rows, w.pattern.v)
        return steady_call(self.launch, ctypes.addressof(args), (args, values, e, gidx, bias, xt), FAMILY.name,
                           (m, w.out_features, k), on=(stream_of(x), self))

    def _twin_for(self, w: VNMWeight) -> _Launcher | None:
        """The tile_m = 64 twin where this kernel's tile_m does not divide V (V = 64 under tile_m = 128), else None;
        ShapeError where no kernel of the family runs V."""
        v = w.pattern.v
        if v % self.cfg.tile_m == 0:
            return None
        if v % 64 == 0 and self.twin is not None:
            return self.twin
        raise ShapeError(f"vnm_sm80 with tile_m={self.cfg.tile_m} needs V % tile_m == 0, got V={v} "
                         "(its CTA tiles are 64 or 128 rows: V >= 64)")

    def _operands(self, x: torch.Tensor, w: VNMWeight) -> tuple[tuple, int, torch.Tensor]:
        """The weight's kernel layout, x's padded token count (ldx) and the scratch its transpose (plus a zero row)
        fills (``call_scratch``: the current stream's workspace, or under graph capture a tensor of its own)."""
        ldx = -(-x.shape[0] // 8) * 8
        nbytes = (w.padded_k + 1) * ldx * self.itemsize
        xt = call_scratch(x.device, nbytes)
        return w.layout(("vnm_sm80",), kernel_layout), ldx, xt


FAMILY = _VnmSm80Family()

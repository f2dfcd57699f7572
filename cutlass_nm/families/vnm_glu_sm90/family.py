"""SwiGLU over co-pruned V:N:M gate and up weights on Hopper: one wgmma.sp GEMM, one gathered B for both.

Gate and up pruned together (``formats.glu.fuse_glu``) form one 256:2:M weight whose V-blocks are [gate block b;
up block b]. This family runs vnm_sm90's kernel with 256-row CTA tiles on two consumer warpgroups (x gathered once
for both halves) and a SwiGLU epilogue that writes h = silu(gate) · up transposed into ``ht`` ((hidden rounded to
the down weight's padded k) x ldx, ldx = m rounded up to 8): the layout the down projection's vnm_sm90 kernel
gathers from. No bias.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...errors import ShapeError
from ...formats.glu import swiglu_reference
from ...formats.vnm import VNMWeight
from ...patterns import Pattern
from ..base import Family, KernelTypes, Problem
from ..vnm_sm90 import family as vnm_sm90

FUSED_V = 256  # gate block + up block of a V = 128 pattern


@dataclass(frozen=True, slots=True)
class Config(vnm_sm90.Config):
    """vnm_sm90's fields with the SwiGLU tile: 256 rows (128 gate + 128 up) on two consumer warpgroups."""

    tile_m: int = 256
    tile_n: int = 128
    tile_k: int = 128
    stages: int = 3
    consumers: int = 2
    mma_pipe: int = 0
    raster: int = 1

    # vnm_sm90's space with the SwiGLU tile: 256 rows on 2 consumers, at most 128 tokens (accumulators)
    SPACE: ClassVar = {**vnm_sm90.Config.SPACE, "tile_m": (256,), "tile_n": (64, 128), "consumers": (2,)}


class _VnmGluSm90Family(Family):
    name = "vnm_glu_sm90"
    arch = "sm_90a"
    weight = VNMWeight
    Config = Config
    templates = vnm_sm90.TEMPLATES  # vnm_sm90's kernel, with its SwiGLU epilogue

    def check(self, cfg: Config, problem: Problem) -> str | None:
        """vnm_sm90's rules, plus: a fused 256:2:M weight (n = 2 · hidden rows, hidden % 128 == 0), no bias."""
        if not isinstance(cfg, Config):
            return f"vnm_glu_sm90 takes its own Config, got {type(cfg).__name__}"
        if problem.types.bias:
            return "the SwiGLU epilogue takes no bias"
        pattern = Pattern.parse(problem.pattern)
        if pattern.v != FUSED_V:
            return f"the SwiGLU kernel runs fused gate/up weights (V = {FUSED_V}: formats.glu.fuse_glu), got " \
                   f"{problem.pattern}"
        if problem.n % FUSED_V:
            return f"a fused gate/up weight has 2 x hidden rows with hidden % 128 == 0, got n = {problem.n}"
        return vnm_sm90.FAMILY.check(cfg, problem)

    def source(self, cfg: Config, types: KernelTypes) -> str:
        return vnm_sm90.emit(cfg, types, glu=True)

    def heuristic(self, problem: Problem) -> Config:
        """The default Config: 128 tokens per CTA (the most accumulators that fit), 3 stages of 128 gathered
        columns, token-tile groups (``raster`` = 1)."""
        return Config()

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, helpers: Sequence[Callable] = ()) -> _Launcher:
        return _Launcher(lib, cfg, types)  # fused weights only (V = 256): no tile_m = 64 twin

    def output_shape(self, m: int, n: int) -> tuple[int, int]:
        """What the kernel writes for m tokens of an n-row fused weight: hT, (n / 2) x (m rounded up to 8)."""
        return n // 2, -(-m // 8) * 8

    def reference(self, x: torch.Tensor, w: VNMWeight) -> torch.Tensor:
        """hT in fp64, zero in the padding tokens: what the tuner's worker checks a candidate against."""
        h = swiglu_reference(x.double(), w)
        out = torch.zeros(self.output_shape(*h.shape[:1], w.out_features), dtype=torch.float64, device=x.device)
        out[:, : x.shape[0]] = h.T
        return out


class _Launcher(vnm_sm90._Launcher):
    """A loaded SwiGLU kernel: ``launcher(x, w, None, ht)`` writes silu(x·Gᵀ) · (x·Uᵀ) transposed into ``ht``."""

    def __call__(self, x: torch.Tensor, w: VNMWeight, bias: torch.Tensor | None, ht: torch.Tensor,
                 xt: torch.Tensor | None = None) -> None:
        if w.pattern.v != FUSED_V:
            raise ShapeError(f"vnm_glu_sm90 runs fused gate/up weights (V = {FUSED_V}), got {w.pattern}")
        hidden, ldx = w.out_features // 2, -(-x.shape[0] // 8) * 8
        if bias is not None:
            raise ShapeError("the SwiGLU epilogue takes no bias")
        if ht.dim() != 2 or ht.shape[0] < hidden or ht.shape[1] != ldx or not ht.is_contiguous():
            raise ShapeError(f"ht must be a contiguous (>= {hidden}, {ldx}) tensor, got {tuple(ht.shape)}")
        super().__call__(x, w, None, ht, xt)

    def steady(self, x: torch.Tensor, w: VNMWeight, bias: torch.Tensor | None, ht: torch.Tensor) -> _Launcher:
        """Itself: its calls keep their checks (the repeated launch is vnm_sm90's, which writes y, not ht)."""
        return self


FAMILY = _VnmGluSm90Family()

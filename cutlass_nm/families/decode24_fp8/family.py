"""One-token decode of an FP8 (e4m3) 2:4 weight on CUDA cores: 0.625 bytes a weight streamed (e4m3 values and the
metadata packed two groups a byte, built once per weight), x in fp16/bf16 as it comes (no quantization) or e4m3
with its scale, per-channel weight scales and the bias applied before the one store. The GEMM
(``sptc24_fp8_sm90``) runs every other m."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...arch import HOPPER
from ...formats.fp8 import Sparse24FP8Weight
from ..base import Family, FamilyConfig, KernelTypes, Problem, package_file
from ..launch import check_status, stream_of
from ..nm_decode.family import STREAM_LOADS

MAX_M = 1  # one token: larger m runs the FP8 GEMM
MAX_IN_FLIGHT = 8  # rows x ahead: chunks a lane holds in registers (4 words of values + 1 of meta each)
K_MULTIPLE = 32  # a chunk is 32 columns: 16 value bytes, 4 packed meta bytes, all rows 16-byte aligned
X_TYPES = {"f16": "__half", "bf16": "__nv_bfloat16", "e4m3": "uint8_t"}
OUT_TYPES = {"f16": "__half", "bf16": "__nv_bfloat16"}
META_KEY = ("decode24_fp8_meta",)
BYTES_PER_WEIGHT = 0.625  # e4m3 values (k / 2 a row) and packed metadata (k / 8)


@dataclass(frozen=True, slots=True)
class Config(FamilyConfig):
    """Warps per CTA, rows per warp, and chunks of 16 nonzeros each lane keeps in flight per row."""

    warps: int = 8
    rows: int = 1
    ahead: int = 4

    SPACE: ClassVar = {"warps": (2, 4, 8, 16), "rows": (1, 2), "ahead": (2, 4, 8)}

    def estimate_ms(self, problem: Problem, sm_count: int = HOPPER.sm_count) -> float:
        """A ranking estimate (tune.perfmodel): the weight's BYTES_PER_WEIGHT at copy bandwidth, slower by the
        share of SMs a grid of under 2 CTAs per SM leaves idle and by few chunks in flight, plus ~4 µs a launch."""
        ctas = -(-problem.n // (self.warps * self.rows))
        fill = min(1.0, ctas / (2 * sm_count))
        stream = problem.n * problem.k * BYTES_PER_WEIGHT + 2 * problem.k + 2 * problem.n
        return (stream / HOPPER.bandwidth / fill * (1 + 2 / (self.rows * self.ahead)) + 4e-6) * 1e3


def one_token_rule(name: str, problem: Problem, others: str = "") -> str | None:
    """What the one-token FP8 decode families (this and ``nm_decode_fp8``) require of every problem: x's and the
    output's types, and m = 1 (``others``: what runs the other m, for the message)."""
    types = problem.types
    if types.dtype not in X_TYPES:
        return f"x dtype {types.dtype} is not supported ({'/'.join(X_TYPES)})"
    if types.out_dtype not in OUT_TYPES:
        return f"output dtype {types.out_dtype} is not supported ({'/'.join(OUT_TYPES)})"
    if problem.m != MAX_M:
        return f"{name} runs one token (m = {MAX_M}), got m = {problem.m}{others}"
    return None


def packed_meta(w: Sparse24FP8Weight) -> torch.Tensor:
    """The weight's metadata two groups a byte (n x k/8 uint8): group 2j in bits 0-3, group 2j + 1 in bits 4-7."""
    meta = w.groups().reshape(w.out_features, -1, 2)
    return (meta[..., 0] | (meta[..., 1] << 4)).contiguous()


class _Decode24FP8Family(Family):
    name = "decode24_fp8"
    arch = "sm_90a"
    weight = Sparse24FP8Weight
    Config = Config
    templates = ("families/decode24_fp8/kernel.cu", STREAM_LOADS)
    input_dtypes = ("f16", "bf16", "e4m3")

    def check(self, cfg: Config, problem: Problem) -> str | None:
        if (why := one_token_rule(self.name, problem, "; the FP8 GEMM runs the others")) is not None:
            return why
        if problem.k % K_MULTIPLE:
            return f"in_features k={problem.k} must be a multiple of {K_MULTIPLE}"
        if cfg.rows * cfg.ahead > MAX_IN_FLIGHT:
            return f"rows x ahead = {cfg.rows * cfg.ahead} chunks in flight per lane > {MAX_IN_FLIGHT} (registers)"
        if problem.pattern != "2:4":
            return f"decode24_fp8 runs 2:4 weights, got {problem.pattern}"
        return None

    def source(self, cfg: Config, types: KernelTypes) -> str:
        return self.template(self.templates[0]).substitute(
            stream_loads=package_file(STREAM_LOADS).read_text(), x_type=X_TYPES[types.dtype],
            out_type=OUT_TYPES[types.out_dtype], warps=cfg.warps, rows=cfg.rows, ahead=cfg.ahead,
            has_bias="true" if types.bias else "false")

    def heuristic(self, problem: Problem) -> Config:
        """The H200 sweep's choice (every config on 7 LLM layers, 1024 x 4096 .. 28672 x 8192): 2 chunks ahead;
        an e4m3 x one row a warp, 4 warps a CTA; a 16-bit x (4x the x bytes per chunk) 2 rows a warp, 2 warps."""
        if problem.types.dtype == "e4m3":
            return Config(warps=4, rows=1, ahead=2)
        return Config(warps=2, rows=2, ahead=2)

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, helpers: Sequence[Callable] = ()) -> _Launcher:
        return _Launcher(lib)


class _Launcher:
    """A loaded kernel: ``launcher(x, w, bias, y, x_scale=None)`` on torch's current stream; x (1 x k) fp16/bf16,
    or e4m3 with its float32 scale."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        lib.cnm_decode.argtypes = [vp, vp, vp, vp, vp, vp, vp, i32, i32, vp]
        lib.cnm_decode.restype = i32
        self.run = lib.cnm_decode

    def __call__(self, x: torch.Tensor, w: Sparse24FP8Weight, bias: torch.Tensor | None, y: torch.Tensor,
                 x_scale: torch.Tensor | None = None) -> None:
        n, k = w.out_features, w.in_features
        meta = w.layout(META_KEY, packed_meta)
        status = self.run(x.data_ptr(), w.values.data_ptr(), meta.data_ptr(), w.scale.data_ptr(),
                          None if x_scale is None else x_scale.data_ptr(),
                          None if bias is None else bias.data_ptr(), y.data_ptr(), n, k, stream_of(x))
        if status:
            check_status(status, FAMILY.name, (x.shape[0], n, k))


FAMILY = _Decode24FP8Family()
"""FP8 2:4 decode on CUDA cores: one token, e4m3 values and packed metadata streamed at memory speed."""

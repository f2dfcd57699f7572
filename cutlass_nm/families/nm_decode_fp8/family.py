"""One-token decode of an FP8 (e4m3) general N:M or V:N:M weight on CUDA cores: e4m3 values and a 4-bit position per
value streamed (0.375 bytes a weight at 2:8; 0.25 where 32 rows share their positions), x in fp16/bf16 as it comes or
e4m3 with its scale, per-channel weight scales and the bias applied before the one store. A V:N:M weight is read as
element-wise 2:M. Other m run the weight's 16-bit twin (``dispatch``)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...arch import HOPPER
from ...formats.fp8 import NMFP8Weight, VNMFP8Weight, fp8_pattern_rule, read_as
from ...patterns import Pattern
from ..base import Family, FamilyConfig, KernelTypes, Problem, package_file
from ..decode24_fp8.family import OUT_TYPES, X_TYPES, one_token_rule
from ..launch import check_status, device_info, stream_of
from ..nm_decode.family import STREAM_LOADS

CHUNK = 16  # kept values a lane loads at once (16 value bytes, 8 position bytes)
MAX_SMEM = 200 * 1024  # x as float in shared memory, plus the warps' partial sums
LAYOUT_KEY = ("nm_decode_fp8",)
SMALLEST = (4, 2)  # (warps, ahead) that runs any k


@dataclass(frozen=True, slots=True)
class Config(FamilyConfig):
    """Warps per CTA (they split one 32-row block's chunks) and chunks each warp keeps in flight."""

    warps: int = 8
    ahead: int = 4

    SPACE: ClassVar = {"warps": (4, 8, 16), "ahead": (2, 4, 8)}

    def estimate_ms(self, problem: Problem, sm_count: int = HOPPER.sm_count) -> float:
        """A ranking estimate (tune.perfmodel): the values and per-row positions at copy bandwidth, slower by the SMs
        a grid of fewer 32-row blocks leaves idle and by few chunks in flight, plus ~4 µs a launch."""
        kv = values_per_row(problem.k, Pattern.parse(problem.pattern))
        fill = min(1.0, -(-problem.n // 32) / sm_count)
        stream = problem.n * kv * 1.5 + 2 * problem.k + 2 * problem.n
        return (stream / HOPPER.bandwidth / fill * (1 + 2 / (self.warps * self.ahead)) + 4e-6) * 1e3


def values_per_row(k: int, pattern: Pattern) -> int:
    """Kept values per row, padded to whole chunks."""
    n, m = read_as(pattern)
    return -(-(-(-k // m) * n) // CHUNK) * CHUNK


def smem_bytes(cfg: Config, k: int, pattern: Pattern) -> int:
    n, m = read_as(pattern)
    return values_per_row(k, pattern) // n * m * 4 + cfg.warps * 32 * 4


def shares_positions(w: NMFP8Weight | VNMFP8Weight) -> bool:
    """Whether the 32 rows of each block share their positions (an N:M weight of vector % 32 == 0): then one set
    of positions per block is streamed, not one per row."""
    return isinstance(w, NMFP8Weight) and w.vector % 32 == 0


def stream_layout(w: NMFP8Weight | VNMFP8Weight) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(values, positions, values per row kv): the kernel's 32-row-block layout (kernel.cu's header), zeros past the
    last row and kept value; values as uint8 bytes [n/32][kv/16][32][16], positions two a byte [n/32][kv/16][32][8],
    or [n/32][kv/16][8] where the block's rows share them."""
    rows = w.out_features
    blocks = -(-rows // 32)
    kv = values_per_row(w.in_features, w.pattern)
    values = torch.zeros(blocks * 32, kv, dtype=torch.uint8, device=w.device)
    values[:rows, : w.values.shape[1]] = w.values.view(torch.uint8)
    if shares_positions(w):
        pos, prows = w.indices.repeat_interleave(w.vector // 32, dim=0)[:blocks], blocks
    else:
        pos = w.row_columns() if isinstance(w, VNMFP8Weight) else w.indices.repeat_interleave(w.vector, dim=0)[:rows]
        prows = blocks * 32
    nib = torch.zeros(prows, kv, dtype=torch.uint8, device=w.device)
    nib[: pos.shape[0], : pos.shape[1]] = pos
    packed = nib[:, 0::2] | (nib[:, 1::2] << 4)
    values = values.reshape(blocks, 32, kv // CHUNK, CHUNK).transpose(1, 2).contiguous()
    if prows == blocks:
        return values, packed.reshape(blocks, kv // CHUNK, CHUNK // 2).contiguous(), kv
    return values, packed.reshape(blocks, 32, kv // CHUNK, CHUNK // 2).transpose(1, 2).contiguous(), kv


def streamed_bytes(w: NMFP8Weight | VNMFP8Weight) -> int:
    """Bytes one call streams for the weight: its values, positions and scales in the kernel's layout."""
    values, pos, _ = w.layout(LAYOUT_KEY, stream_layout)
    return values.numel() + pos.numel() + 4 * w.out_features


class _NMDecodeFP8Family(Family):
    name = "nm_decode_fp8"
    arch = "sm_90a"
    weight = NMFP8Weight
    also_runs = (VNMFP8Weight,)
    Config = Config
    templates = ("families/nm_decode_fp8/kernel.cu", STREAM_LOADS)
    input_dtypes = ("f16", "bf16", "e4m3")

    def check(self, cfg: Config, problem: Problem) -> str | None:
        if (why := one_token_rule(self.name, problem)) is not None:
            return why
        pattern = Pattern.parse(problem.pattern)
        if pattern.is_24 or (why := fp8_pattern_rule(pattern)) is not None:
            return "2:4 FP8 weights run decode24_fp8" if pattern.is_24 else why
        chunks = values_per_row(problem.k, pattern) // CHUNK
        if cfg.warps * cfg.ahead > chunks and (cfg.warps, cfg.ahead) != SMALLEST:
            return f"warps x ahead = {cfg.warps * cfg.ahead} chunks in flight > the {chunks} of a row: warps idle"
        if (need := smem_bytes(cfg, problem.k, pattern)) > MAX_SMEM:
            return f"k = {problem.k}: x takes {need} bytes of shared memory > {MAX_SMEM}"
        return None

    def source(self, cfg: Config, types: KernelTypes) -> str:
        return self.template(self.templates[0]).substitute(
            stream_loads=package_file(STREAM_LOADS).read_text(), x_type=X_TYPES[types.dtype],
            out_type=OUT_TYPES[types.out_dtype], warps=cfg.warps, ahead=cfg.ahead,
            has_bias="true" if types.bias else "false")

    def heuristic(self, problem: Problem) -> Config:
        """16 warps split a row block's chunks, 4 in flight each; fewer where a row has few chunks."""
        chunks = values_per_row(problem.k, Pattern.parse(problem.pattern)) // CHUNK
        warps = 16 if chunks >= 64 else 8 if chunks >= 32 else 4
        return Config(warps=warps, ahead=4 if chunks >= 4 * warps else 2)

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, helpers: Sequence[Callable] = ()) -> _Launcher:
        return _Launcher(lib)


class _Launcher:
    """A loaded kernel: ``launcher(x, w, bias, y, x_scale=None)`` on torch's current stream; x (1 x k) fp16/bf16,
    or e4m3 with its float32 scale."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        lib.cnm_decode.argtypes = [vp, vp, vp, vp, vp, vp, vp, i32, i32, i32, i32, i32, i32, i32, vp]
        lib.cnm_decode.restype = i32
        self.run = lib.cnm_decode

    def __call__(self, x: torch.Tensor, w: NMFP8Weight | VNMFP8Weight, bias: torch.Tensor | None, y: torch.Tensor,
                 x_scale: torch.Tensor | None = None) -> None:
        n, k = w.out_features, w.in_features
        values, pos, kv = w.layout(LAYOUT_KEY, stream_layout)
        keep, group = read_as(w.pattern)
        status = self.run(x.data_ptr(), values.data_ptr(), pos.data_ptr(), w.scale.data_ptr(),
                          None if x_scale is None else x_scale.data_ptr(),
                          None if bias is None else bias.data_ptr(), y.data_ptr(), n, k, kv, keep.bit_length() - 1,
                          group, int(pos.dim() == 3), device_info(x.device).sm_count, stream_of(x))
        if status:
            check_status(status, FAMILY.name, (x.shape[0], n, k))


FAMILY = _NMDecodeFP8Family()
"""FP8 N:M and V:N:M decode on CUDA cores: one token, e4m3 values and 4-bit positions streamed at memory speed."""

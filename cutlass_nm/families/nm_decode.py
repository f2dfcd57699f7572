"""General N:M decode on CUDA cores: m = 1-16 tokens, a warp streams a weight row at memory speed.

Our own kernel (codegen/templates/nm_decode.cu): there is nothing in CUTLASS for a gather-by-index
GEMV. N, M and the index-sharing vector are launch arguments, so one binary serves every pattern.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..formats.nm import NMWeight, decode_layout
from .base import FamilyConfig, KernelTypes, Problem
from .launch import check_status

ELEMENTS = {"f16": "__half", "bf16": "__nv_bfloat16"}


@dataclass(frozen=True, slots=True)
class Config(FamilyConfig):
    """Tokens handled per launch (accumulators per thread) and warps (rows) per block."""

    max_tokens: int = 16
    warps: int = 4

    SPACE: ClassVar = {"max_tokens": (1, 2, 4, 8, 16), "warps": (2, 4, 8)}


class _DecodeFamily:
    name = "nm_decode"
    arch = "sm_80"
    weight = NMWeight
    Config = Config

    def space(self) -> dict[str, tuple]:
        return Config.SPACE

    def check(self, cfg: Config, problem: Problem) -> str | None:
        if problem.m > cfg.max_tokens:
            return f"m={problem.m} exceeds this config's max_tokens={cfg.max_tokens} (the decode path takes m <= 16)"
        if problem.types.out_dtype not in ("f32", problem.types.dtype):
            return "output must be the input dtype or f32"
        return None

    def source(self, cfg: Config, types: KernelTypes) -> str:
        from ..codegen.cutlass_emit import template

        return template("nm_decode.cu").substitute(element=ELEMENTS[types.dtype], max_tokens=int(cfg.max_tokens),
                                                   warps=int(cfg.warps))

    def heuristic(self, problem: Problem) -> Config:
        tokens = next(t for t in Config.SPACE["max_tokens"] if t >= min(problem.m, 16))
        return Config(max_tokens=tokens, warps=4)

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes) -> _Launcher:
        return _Launcher(lib, types)


class _Launcher:
    def __init__(self, lib: ctypes.CDLL, types: KernelTypes) -> None:
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        lib.cnm_run.argtypes = [vp, vp, vp, vp, vp, i32, i32, i32, i32, i32, i32, i32, i32, vp]
        lib.cnm_run.restype = i32
        self.run = lib.cnm_run
        self.out_kind = 1 if types.out_dtype == "f32" else 0

    def __call__(self, x: torch.Tensor, w, bias: torch.Tensor | None, y: torch.Tensor) -> None:
        m, k = x.shape
        values, indices, stride = w.layout(("decode",), decode_layout)
        stream = torch.cuda.current_stream(x.device).cuda_stream
        status = self.run(x.data_ptr(), values.data_ptr(), indices.data_ptr(),
                          None if bias is None else bias.data_ptr(), y.data_ptr(), m, w.out_features, k,
                          w.pattern.n, w.pattern.m, w.vector, stride, self.out_kind, stream)
        check_status(status, FAMILY.name, (m, w.out_features, k))


FAMILY = _DecodeFamily()

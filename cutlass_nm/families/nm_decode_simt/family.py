"""N:M and V:N:M decode (m <= 16 tokens) on CUDA cores: the decode template's mode 0, lanes along k.

It runs what the tensor-core decode family (``nm_decode``) cannot: N:M weights whose positions are not shared by a
multiple of 32 rows (any vector, element-wise included) and V:N:M weights with V % 32 != 0 (read as element-wise
2:M). Same template (``families/nm_decode/kernel.cu``), launch plan and launcher as ``nm_decode``, whose module
holds them; this family fixes the tensor-core-only fields (bulk, prefetch, min_ctas, early_release, wsplit).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...formats.nm import NMWeight
from ...formats.vnm import VNMWeight
from ...patterns import Pattern
from ..base import Family, KernelTypes, Problem
from ..nm_decode import family as decode
from ..nm_decode.family import MAX_ACCUMULATORS, Launcher, SimtConfig


@dataclass(frozen=True, slots=True)
class Config(SimtConfig):
    """One CUDA-core N:M / V:N:M decode kernel and its launch (the fields: ``nm_decode.family.SimtConfig``)."""


class _DecodeSimtFamily(Family):
    name = "nm_decode_simt"
    arch = "sm_80"
    weight = NMWeight
    also_runs = (VNMWeight,)  # read as element-wise 2:M
    Config = Config
    templates = (decode.TEMPLATE, decode.STREAM_LOADS)  # nm_decode's kernel, mode 0

    def check(self, cfg: Config, problem: Problem) -> str | None:
        if (reason := decode.common_rules(self, cfg, problem)) is not None:
            return reason
        Pattern.parse(problem.pattern)  # any N:M or V:N:M pattern (a malformed one raises PatternError)
        if cfg.rows * cfg.max_tokens > MAX_ACCUMULATORS:
            return f"rows x max_tokens = {cfg.rows * cfg.max_tokens} accumulators per thread > {MAX_ACCUMULATORS}"
        return None

    def source(self, cfg: Config, types: KernelTypes) -> str:
        return decode.emit(self, cfg, types)

    def heuristic(self, problem: Problem) -> Config:
        """The measured H100 choice: large CTAs, fewer rows per warp as accumulators grow; one token: transposed
        gathers at >= 75 % sparsity, small CTAs below 2^25 weights."""
        pattern = Pattern.parse(problem.pattern)
        small = problem.n * problem.k < 1 << 25
        tokens = next(t for t in Config.SPACE["max_tokens"] if t >= min(problem.m, 16))
        if tokens == 1:
            keep, group = (2, pattern.m) if pattern.is_vnm else (pattern.n, pattern.m)
            return Config(max_tokens=1, warps=4 if small else 16, rows=1, transpose=int(group >= 4 * keep))
        warps, rows = {2: (16, 1), 4: (16, 2), 8: (16, 2), 16: (16, 1)}[tokens]
        return Config(max_tokens=tokens, warps=warps, rows=rows)

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, helpers: Sequence[Callable] = ()) -> Launcher:
        return Launcher(lib, cfg, types, self.name)

    def fingerprint_files(self) -> tuple[str, ...]:
        """Its module, nm_decode's (the plan, source and launcher it uses) and the template."""
        module = decode.__name__.removeprefix("cutlass_nm.").replace(".", "/") + ".py"
        return (*super().fingerprint_files()[:1], module, *self.templates)


FAMILY = _DecodeSimtFamily()
"""N:M (any vector) and V:N:M decode on CUDA cores: m = 1-16 tokens, weights streamed at memory speed."""

"""2:4 decode (m <= 16 tokens) on CUDA cores: a ``Sparse24Weight``'s values and packed metadata read in place.

The decode template's mode 0 (lanes along k, ``nm_decode_simt``'s kernel) with its index stream switched at compile
time to the 2:4 metadata (``kMeta24``): a nibble per group of 4, in the layout the sm90 GEMMs read too, instead of
a byte per nonzero, so a call streams 1.125 bytes per weight (0.5625x dense fp16) and the weight needs no decode
copy. When k % 16 == 0 each row's k / 2 values are whole 16-byte chunks of 8 nonzeros: that is the family's one
shape rule (the sptc24 GEMMs share it). At one token a lane loads its chunk's 16 x columns at once and picks each
group's kept pair with one byte permute; the metadata goes through L1, where the warps of a CTA share its sectors.
The launch plan, source and launcher are nm_decode's (its module holds them), over the weight's own tensors.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ...arch import target
from ...errors import ShapeError
from ...formats.sparse24 import Sparse24Weight
from ...formats.weight import kernel_alias
from ...patterns import Pattern
from ..base import Family, KernelTypes, Problem
from ..nm_decode import family as decode
from ..nm_decode.family import MAX_ACCUMULATORS, SimtConfig

K_MULTIPLE = 16  # k a multiple of this: a row's k / 2 values are whole chunks of 8 nonzeros, 16-byte aligned
ONE_TOKEN_CTAS = {(4, 2): 10, (8, 2): 5, (8, 1): 6}  # (warps, rows): resident one-token CTAs per H100 SM (registers)
MIN_TAIL = 0.35  # the thinnest last wave (a fraction of the resident CTAs) that still keeps HBM busy


@dataclass(frozen=True, slots=True)
class Config(SimtConfig):
    """One 2:4 decode kernel and its launch (the fields: ``nm_decode.family.SimtConfig``)."""


def full_last_wave(cfg: Config, n: int, k: int) -> bool:
    """Whether a one-token ``cfg``'s grid on n x k fits one wave or ends in a last wave of >= MIN_TAIL of the GPU
    (a thinner one leaves HBM idle: 11008 x 4096 in 1.04 waves ran 13 % slower than in 1.74). Resident CTAs per SM
    are those measured on the H100 (ONE_TOKEN_CTAS; for any other warps x rows: True)."""
    per_sm = ONE_TOKEN_CTAS.get((cfg.warps, cfg.rows))
    if per_sm is None:
        return True
    sms = target().sm_count
    split = decode.plan(cfg, n, k // 2, 2, 4, sms)[0]
    waves = -(-n // cfg.block_rows) * split / (per_sm * sms)
    return waves <= 1 or waves % 1 >= MIN_TAIL


def shape_rule(k: int) -> str | None:
    """Why a 2:4 weight of ``k`` columns cannot be read in place (None: it can)."""
    if k % K_MULTIPLE:
        return (f"decode24 reads a 2:4 weight in place, which needs k % {K_MULTIPLE} == 0 (whole 16-byte chunks of 8 "
                f"nonzeros per row), got k = {k}; the sptc24 GEMMs need it too: pad in_features to a multiple of "
                f"{K_MULTIPLE}")
    return None


def in_place_layout(w: Sparse24Weight) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(values, meta, stride = k / 2): the weight's own tensors, no copy, when the values are contiguous and 16-byte
    aligned and the metadata's rows (slabs, possibly a column slice of a stack's) contiguous and 2-byte aligned,
    as ``compress_24`` and ``SparseLinear`` make them; otherwise a copy, once. The launcher passes the metadata's
    pitch (``meta.stride(0)``). Raises ShapeError unless k % 16 == 0."""
    if (why := shape_rule(w.in_features)) is not None:
        raise ShapeError(why)
    return kernel_alias(w.values, 16, w.values.is_contiguous()), kernel_alias(w.meta, 2, w.meta.stride(1) == 1), \
        w.in_features // 2


class _Decode24Family(Family):
    name = "decode24"
    arch = "sm_80"
    weight = Sparse24Weight
    Config = Config
    templates = (decode.TEMPLATE, decode.STREAM_LOADS)  # nm_decode's kernel, mode 0, with 2:4 meta bytes

    def check(self, cfg: Config, problem: Problem) -> str | None:
        if (reason := decode.common_rules(self, cfg, problem)) is not None:
            return reason
        if not Pattern.parse(problem.pattern).is_24:
            return f"decode24 runs 2:4 weights, got {problem.pattern} (nm_decode_simt runs N:M and V:N:M)"
        if (reason := shape_rule(problem.k)) is not None:
            return reason
        if cfg.rows * cfg.max_tokens > MAX_ACCUMULATORS:
            return f"rows x max_tokens = {cfg.rows * cfg.max_tokens} accumulators per thread > {MAX_ACCUMULATORS}"
        return None

    def source(self, cfg: Config, types: KernelTypes) -> str:
        return decode.emit(self, cfg, types, meta24=True)

    def heuristic(self, problem: Problem) -> Config:
        """The H100 sweeps' choice (warps x rows x ahead; one chunk in flight won at one token). One token: below 2^25
        weights 8 warps of one row; above, 2 rows a warp (4 warps, else 8) unless the grid ends in a thin last wave,
        then 8 warps of one row (1.51-1.83x cuBLAS over 4096² .. 28672 x 8192). 2-4 tokens: 2 rows a warp, 8 warps
        below 2^25 weights, 16 above; 8-16 tokens: 16 warps, 2 chunks in flight at 16."""
        tokens = next(t for t in Config.SPACE["max_tokens"] if t >= min(problem.m, 16))
        if tokens == 1:
            one_row = Config(max_tokens=1, warps=8, rows=1, ahead=1)
            if problem.n * problem.k < 1 << 25:
                return one_row
            two_rows = (Config(max_tokens=1, warps=w, rows=2, ahead=1) for w in (4, 8))
            return next((c for c in two_rows if full_last_wave(c, problem.n, problem.k)), one_row)
        if tokens <= 4:
            return Config(max_tokens=tokens, warps=8 if problem.n * problem.k < 1 << 25 else 16, rows=2)
        return Config(max_tokens=tokens, warps=16, rows=1 if tokens == 16 else 2, ahead=2 if tokens == 16 else 1)

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, helpers: Sequence[Callable] = ()
             ) -> decode.Launcher:
        return Launcher(lib, cfg, types, self.name)

    def fingerprint_files(self) -> tuple[str, ...]:
        """Its module, nm_decode's (the plan, source and launcher it uses) and the template."""
        module = decode.__name__.removeprefix("cutlass_nm.").replace(".", "/") + ".py"
        return (*super().fingerprint_files()[:1], module, *self.templates)


class Launcher(decode.Launcher):
    """nm_decode's launcher over the weight's own values and meta (:func:`in_place_layout`)."""

    def __init__(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, family: str) -> None:
        super().__init__(lib, cfg, types, family)
        self.layout = in_place_layout
        self.layout_key = (in_place_layout.__name__,)

    def index_arg(self, w: Sparse24Weight, indices: torch.Tensor) -> int:
        """The metadata's pitch (bytes from one 64-column slab to the next), which the kernel takes as ``vector``."""
        return indices.stride(0)


FAMILY = _Decode24Family()
"""2:4 decode on CUDA cores: m = 1-16 tokens, values and meta bytes streamed in place at memory speed."""

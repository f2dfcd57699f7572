"""N:M and V:N:M decode (m <= 16 tokens) on tensor cores: our own gather-by-index GEMV, weights streamed at memory
speed. This module also holds what the CUDA-core decode families (``nm_decode_simt``, and ``decode24`` for 2:4 weights
read in place) share: the kernel template's derived sizes, the launch plan, the source and the launcher.

N, M and the index-sharing vector are launch arguments, so one binary serves every pattern. ``Config.mode``: 2,
a warp's 32 rows on tensor cores for N:M weights whose vector is a multiple of 32; 3, sparse tensor cores for
V:N:M weights with V % 32 == 0 (the template's mode 0, lanes along k on CUDA cores, is ``nm_decode_simt``). A
cluster of ``split`` CTAs splits a row block's nonzeros along k; each CTA stages the x columns its k-range touches
in shared memory. Every launch after a weight's first uses programmatic dependent launch (PDL).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ...arch import HOPPER, target
from ...errors import ShapeError
from ...formats.nm import NMWeight, decode_layout, decode_mma_layout
from ...formats.vnm import VNMWeight, decode_vnm_layout
from ...patterns import Pattern, parse_or_none
from ..base import Family, FamilyConfig, KernelTypes, Problem, half_inputs_only, package_file
from ..launch import check_status, device_info, packed_launch, steady_call, stream_of

TEMPLATE = "families/nm_decode/kernel.cu"  # both decode families' kernel
STREAM_LOADS = "codegen/stream_loads.cuh"  # the weight-stream loads it splices in (``${stream_loads}``)
ELEMENTS = {"f16": "__half", "bf16": "__nv_bfloat16"}
SMEM_BUDGET = 96 * 1024  # per CTA: two CTAs fit an SM's shared memory
MAX_ACCUMULATORS = 64  # fp32 sums per thread (rows x max_tokens) before registers spill
MAX_SPLIT = 8  # portable cluster size
MAX_FIXED = SMEM_BUDGET - 8 * 1024  # sums + rings: x pieces get the rest (>= one group of 256 columns x 16 tokens)
CTAS_PER_SM = 2  # split-K until the grid has this many CTAs per SM
XS_LINE = 128  # mode 0's staged x: bytes of the line inside which the template swizzles columns
LAYOUTS = {0: decode_layout, 2: decode_mma_layout, 3: decode_vnm_layout}  # each mode's weight layout


class DecodeKernel:
    """What the template is built from, derived from a decode config (either family's): its fields, or the
    constants a family fixes (``mode``, ``rows``, ``transpose``, ``bulk``, ``prefetch``, ``min_ctas``,
    ``max_ctas``, ``early_release``, ``wsplit``, ``push``)."""

    __slots__ = ()
    max_tokens: int
    warps: int
    ahead: int
    split: int
    mode: int
    rows: int
    transpose: int
    bulk: int
    prefetch: int
    min_ctas: int
    max_ctas: int
    early_release: int
    wsplit: int
    push: int

    @property
    def staged(self) -> bool:
        """x is staged in shared memory (always but for one token on CUDA cores, which reads it from L1)."""
        return self.max_tokens > 1 or bool(self.mode)

    @property
    def block_rows(self) -> int:
        return self.warps * (32 if self.mode else self.rows) // self.wsplit

    @property
    def red_bytes(self) -> int:
        """Shared memory of the sums (the template's kRedBytes): one fp32 slot per warp, row and token (16-byte
        aligned), and with ``push`` a block's receive slots plus 128 bytes that end in their mbarrier."""
        own = -(-self.block_rows * self.wsplit * self.max_tokens * 4 // 16) * 16
        return own + (self.block_rows * self.max_tokens * 4 + 128 if self.push else 0)

    @property
    def transpose_bytes(self) -> int:
        """Mode 0's per-warp transpose buffer (the template's kTransposeBytes): 256 2-byte values and index bytes
        per row."""
        return self.rows * 256 * 3 if self.transpose else 0

    @property
    def ring_bytes(self) -> int:
        """The bulk stream's rings (the template's kRingBytes): per warp 2·ahead steps of 1024 value and 16 index
        bytes and an 8-byte mbarrier, 16-byte aligned."""
        return -(-self.warps * 2 * self.ahead * 1048 // 16) * 16 if self.bulk else 0

    @property
    def unit(self) -> int:
        """Nonzero positions per step of a row: 8 (16-byte loads) on CUDA cores, 16 on tensor cores (one mma k-step)."""
        return 16 if self.mode >= 2 else 8

    def estimate_ms(self, problem: Problem, sm_count: int = HOPPER.sm_count) -> float:
        """A ranking estimate (tune.perfmodel): the stored weight (values and index bytes) once per launch of
        ``max_tokens`` tokens plus x and y at copy bandwidth, tensor-core modes ~1.3x faster than mode 0 and 2 steps
        in flight best (as measured on the H100), and ~4 µs fixed per launch."""
        p = parse_or_none(problem.pattern)
        keep, group = ((2, p.m) if p.is_vnm else (p.n, p.m)) if p is not None else (2, 8)
        launches = -(-problem.m // self.max_tokens)
        stream = launches * problem.n * problem.k * keep / group * 2.5 + problem.m * (problem.k + problem.n) * 2
        choice = (1.0 if self.mode in (2, 3) else 1.3) * (1.0 if self.ahead == 2 else 1.1)
        return (stream / HOPPER.bandwidth * choice + launches * 4e-6) * 1e3


@dataclass(frozen=True, slots=True)
class Config(DecodeKernel, FamilyConfig):
    """One tensor-core decode kernel and its launch. ``max_tokens``: tokens per launch; ``warps`` per CTA;
    ``ahead``: steps each warp keeps in flight; ``mode`` 2 (N:M, 32 rows sharing positions) or 3 (V:N:M);
    ``bulk`` (mode 2: values by TMA bulk copies into rings of 2·ahead steps), ``prefetch`` (steps kept requested
    into L2), ``early_release`` (the next PDL launch starts at entry), ``wsplit`` (warps sharing one 32-row block).
    ``ctas``, CTAs per SM: 0 the compiler's choice, c > 0 registers bounded so that at least c fit, -c exactly c
    (registers for c, and shared memory padded so that no more share an SM). Launch-only: ``split`` (CTAs per
    cluster along k, 0: ``plan``'s rule). ``push``: a cluster's sums are pushed to their owner by ``st.async``.
    A warp always owns 32 rows (``rows`` = 1, no ``transpose``)."""

    max_tokens: int = 16
    warps: int = 4
    ahead: int = 1
    mode: int = 2
    bulk: int = 0
    split: int = 0
    prefetch: int = 0
    ctas: int = 0
    early_release: int = 0
    wsplit: int = 1
    push: int = 0

    rows: ClassVar[int] = 1
    transpose: ClassVar[int] = 0

    # ctas = -2 (exactly 2 CTAs per SM) is the only cap measured (with registers for 2); see decisions/nm_decode.md
    SPACE: ClassVar = {"max_tokens": (1, 2, 4, 8, 16), "warps": (4, 8, 16), "ahead": (1, 2), "mode": (2, 3),
                       "bulk": (0, 1), "split": (0, 1, 2, 4, 8), "prefetch": (0, 4), "ctas": (0, 2, 3, 4, -2),
                       "early_release": (0, 1), "wsplit": (1, 4, 8), "push": (0, 1)}

    @property
    def min_ctas(self) -> int:  # type: ignore[override]
        """The CTAs per SM the registers must allow (the template's kMinCtas; 0: the compiler's choice)."""
        return abs(self.ctas)

    @property
    def max_ctas(self) -> int:  # type: ignore[override]
        """The CTAs per SM shared memory is padded to (0: no padding)."""
        return -self.ctas if self.ctas < 0 else 0


def fixed_smem(cfg: DecodeKernel) -> int:
    """Shared memory a CTA needs besides staged x: sums, transpose buffers and bulk rings, laid out in that order
    (the template asserts the same sizes)."""
    return cfg.red_bytes + cfg.warps * cfg.transpose_bytes + cfg.ring_bytes


@dataclass(frozen=True, slots=True)
class SimtConfig(DecodeKernel, FamilyConfig):
    """A CUDA-core decode kernel (mode 0: lanes along k) and its launch, as ``nm_decode_simt`` and ``decode24`` build
    it. ``max_tokens``: tokens per launch; ``warps`` per CTA; ``rows`` per warp; ``ahead``: chunks of 8 nonzeros
    each lane keeps in flight; ``transpose``: a warp's chunks go through shared memory so lanes gather neighbouring
    x columns. Launch-only: ``split`` (CTAs per cluster along k, 0: ``plan``'s rule), ``max_ctas`` (shared memory
    padded so at most that many CTAs share an SM). ``push``: a cluster's sums are pushed to their owner by
    ``st.async``."""

    max_tokens: int = 16
    warps: int = 4
    rows: int = 1
    ahead: int = 1
    transpose: int = 0
    split: int = 0
    max_ctas: int = 0
    push: int = 0

    mode: ClassVar[int] = 0  # lanes along k; the tensor-core stream options do not apply
    bulk: ClassVar[int] = 0
    prefetch: ClassVar[int] = 0
    min_ctas: ClassVar[int] = 0
    early_release: ClassVar[int] = 0
    wsplit: ClassVar[int] = 1

    SPACE: ClassVar = {"max_tokens": (1, 2, 4, 8, 16), "warps": (4, 8, 16), "rows": (1, 2), "ahead": (1, 2),
                       "transpose": (0, 1), "split": (0, 1, 2, 4, 8), "max_ctas": (0, 2), "push": (0, 1)}


@functools.lru_cache(maxsize=4096)
def plan(cfg: DecodeKernel, n: int, stride: int, keep: int, group: int, sm_count: int, clusters: bool = True
         ) -> tuple[int, int, int]:
    """(split, piece, smem_bytes) for a launch: split-K (a cluster, sm_90+) until the grid fills ``CTAS_PER_SM``
    CTAs per SM, or ``cfg.split`` when set, while each CTA keeps >= 64 chunks of a row in mode 0, >= 8 steps in
    modes 2 and 3; and x pieces of ``piece`` chunks that fit the budget (mode 0: in whole 128-byte lines, which its
    swizzle permutes)."""
    block_rows = cfg.block_rows
    chunks = stride // cfg.unit
    blocks = -(-n // block_rows)
    split = 1
    # mode 0 splits a row's chunks over 32 lanes; modes 2 and 3 walk a warp's steps one at a time
    min_chunks = 8 if cfg.mode else 64
    target = cfg.split or MAX_SPLIT
    while (clusters and split < target and (cfg.split or blocks * split < CTAS_PER_SM * sm_count)
           and chunks >= min_chunks * split):
        split *= 2
    red = fixed_smem(cfg)
    per_cta = -(-chunks // split)
    if not cfg.staged:  # one token read straight from L1: nothing staged
        return split, per_cta, max(red, capped_smem(cfg))
    need = ((cfg.unit * per_cta - 1) // keep + 2) * group  # x columns one CTA's k-range touches
    # max_tokens 16-bit tokens a column; modes 2 and 3 load 8 columns from the 8-aligned column below (slack)
    col_bytes = 2 * cfg.max_tokens
    slack = 16 if cfg.mode else 0
    # mode 0 XOR-swizzles staged x inside 128-byte lines (the template's xs_offset): its columns take whole lines
    line = 1 if cfg.mode else XS_LINE
    cap = min(need, (SMEM_BUDGET - red) // line * line // col_bytes - slack)
    piece = min(per_cta, (cap // group - 1) * keep // cfg.unit)
    if piece < 1:
        raise ShapeError(f"nm_decode: a group of {group} columns does not fit the shared-memory budget")
    return split, piece, max(red + -(-(cap + slack) * col_bytes // line) * line, capped_smem(cfg))


def capped_smem(cfg: DecodeKernel) -> int:
    """The shared memory that lets at most ``cfg.max_ctas`` CTAs share an SM of the target GPU (each CTA also
    reserves 1 KB), or 0."""
    return target().smem_per_sm // (cfg.max_ctas + 1) - 1024 + 16 if cfg.max_ctas else 0


def emit(family: Family, cfg: DecodeKernel, types: KernelTypes, meta24: bool = False) -> str:
    """The translation unit of ``cfg`` for ``types``: the shared template with every constant substituted.
    ``meta24``: the index stream is a 2:4 weight's meta bytes (mode 0 only; the ``decode24`` family)."""
    return family.template(TEMPLATE).substitute(
        stream_loads=package_file(STREAM_LOADS).read_text(), meta24="true" if meta24 else "false",
        element=ELEMENTS[types.dtype], max_tokens=int(cfg.max_tokens), warps=int(cfg.warps), rows=int(cfg.rows),
        stage_x=int(cfg.staged), ahead=int(cfg.ahead), transpose="true" if cfg.transpose else "false",
        mode=int(cfg.mode), bulk=int(cfg.bulk), prefetch=int(cfg.prefetch), min_ctas=int(cfg.min_ctas),
        early_release="true" if cfg.early_release else "false", wsplit=int(cfg.wsplit),
        push="true" if cfg.push else "false", red_bytes=int(cfg.red_bytes),
        transpose_bytes=int(cfg.transpose_bytes), ring_bytes=int(cfg.ring_bytes))


def common_rules(family: Family, cfg: Any, problem: Problem) -> str | None:
    """The rules both decode families share: its own Config, fp16/bf16 inputs, m within max_tokens, the output
    type, and the shared memory the sums and rings leave for staged x."""
    if not isinstance(cfg, family.Config):
        return f"{family.name} takes its own Config, got {type(cfg).__module__}.{type(cfg).__name__}"
    if (reason := half_inputs_only(problem.types)) is not None:
        return reason
    if problem.m > cfg.max_tokens:
        return f"m={problem.m} exceeds this config's max_tokens={cfg.max_tokens} (the decode path takes m <= 16)"
    if problem.types.out_dtype not in ("f32", problem.types.dtype):
        return "output must be the input dtype or f32"
    if fixed_smem(cfg) > MAX_FIXED:
        return (f"{fixed_smem(cfg)} bytes of sums and bulk rings ({cfg.warps} warps, {cfg.max_tokens} tokens, "
                f"ahead {cfg.ahead}) leave too little of the {SMEM_BUDGET}-byte budget for staged x")
    return None


class _DecodeFamily(Family):
    name = "nm_decode"
    arch = "sm_80"
    weight = NMWeight
    also_runs = (VNMWeight,)  # mode 3 (sparse tensor cores) with V % 32 == 0
    Config = Config
    templates = (TEMPLATE, STREAM_LOADS)

    def check(self, cfg: Config, problem: Problem) -> str | None:
        if (reason := common_rules(self, cfg, problem)) is not None:
            return reason
        if cfg.mode not in (2, 3):
            return (f"nm_decode runs the tensor-core modes 2 and 3, got mode={cfg.mode} (lanes along k on CUDA "
                    "cores are the nm_decode_simt family)")
        if cfg.bulk and cfg.mode != 2:
            return "bulk=1 streams mode 2's values (tensor cores): it needs mode=2"
        if cfg.prefetch and cfg.bulk:
            return "prefetch keeps the register stream of modes 2 and 3 ahead in L2: it needs bulk=0"
        if cfg.wsplit > 1 and (cfg.bulk or cfg.warps % cfg.wsplit):
            return (f"wsplit={cfg.wsplit} (warps sharing a 32-row block) needs values in registers (bulk=0) and "
                    f"warps a multiple of it, got bulk={cfg.bulk}, warps={cfg.warps}")
        if cfg.min_ctas * cfg.warps * 32 * 64 > target().regs_per_sm:
            return (f"{cfg.min_ctas} CTAs of {cfg.warps} warps per SM leave fewer than 64 registers per thread "
                    "(the kernel would spill)")
        pattern = Pattern.parse(problem.pattern)
        if cfg.mode == 3 and (not pattern.is_vnm or pattern.v % 32):
            return (f"mode=3 (sparse tensor cores) needs a V:N:M weight with V % 32 == 0, got {problem.pattern} "
                    "(nm_decode_simt runs it on CUDA cores)")
        if cfg.mode == 2 and (pattern.is_vnm or not problem.vector or problem.vector % 32):
            return ("mode=2 (tensor cores) needs an N:M weight whose vector of rows sharing positions is a multiple "
                    f"of 32, got vector {problem.vector or 'unknown'} ({problem.pattern}; nm_decode_simt runs any "
                    "vector on CUDA cores)")
        return None

    def source(self, cfg: Config, types: KernelTypes) -> str:
        return emit(self, cfg, types)

    def heuristic(self, problem: Problem) -> Config:
        """The measured H100 choice: mode 3 for V:N:M, mode 2 for N:M (32 rows share their positions; check()
        refuses the weights that do not). 8 warps, 2 steps in flight, one kernel for 1-8 tokens and one for 9-16,
        registers for 3 CTAs per SM; mode 2 keeps 4 steps ahead in L2, or below 2^25 weights streams by TMA bulk
        rings with exactly 2 CTAs per SM. One token on >= 2048 rows and 2^24 weights: narrow x, 8 warps on each
        32-row block, clusters up to ~256 CTAs."""
        vnm = Pattern.parse(problem.pattern).is_vnm
        small = problem.n * problem.k < 1 << 25
        mma_tokens = 8 if problem.m <= 8 else 16
        sm_count = target().sm_count
        if problem.m == 1 and problem.n * problem.k >= 1 << 24 and problem.n >= 2048:
            # no cluster where the row blocks fill the GPU, else clusters up to ~256 CTAs (N:M: 2 up to 4 CTAs an
            # SM in one wave); 4 CTAs an SM past 3 an SM; N:M at k <= 4096 or in a cluster releases the next call
            # at entry; sums pushed to their owner
            blocks = -(-problem.n // 32)
            split = 1 << (min(MAX_SPLIT, max(1, 256 // blocks)).bit_length() - 1)
            if not vnm and split == 1 and 2 * blocks <= 4 * sm_count:
                split = 2
            return Config(max_tokens=1, warps=8, ahead=1, mode=3 if vnm else 2, prefetch=0 if vnm else 4, wsplit=8,
                          split=split, ctas=4 if blocks * split > 3 * sm_count else 3,
                          early_release=int(not vnm and (problem.k <= 4096 or split > 1)), push=1)
        if vnm:  # the L2 prefetch window loses in mode 3
            return Config(max_tokens=mma_tokens, warps=8, ahead=2, mode=3, ctas=3, push=1)
        # below 2^25 weights: bulk rings, exactly 2 CTAs per SM, sums pushed; above, a free third slot lets the
        # next PDL call start early
        return Config(max_tokens=mma_tokens, warps=8, ahead=2, mode=2, bulk=int(small), ctas=-2 if small else 3,
                      prefetch=0 if small else 4, push=int(small))

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, helpers: Sequence[Callable] = ()) -> Launcher:
        return Launcher(lib, cfg, types, self.name)


class RunArgs(ctypes.Structure):
    """The template's ``RunArgs``: ``cnm_run``'s arguments but x, y and the stream, packed once per call signature."""

    _fields_ = [("values", ctypes.c_void_p), ("indices", ctypes.c_void_p), ("bias", ctypes.c_void_p)] + [
        (name, ctypes.c_int) for name in ("m", "n", "k", "keep", "group", "vector", "stride", "split", "piece",
                                          "smem_bytes", "out_kind", "pdl")]


class Launcher:
    """Either decode family's launcher: ``cnm_run`` over the weight's layout for the config's mode."""

    def __init__(self, lib: ctypes.CDLL, cfg: DecodeKernel, types: KernelTypes, family: str) -> None:
        i32 = ctypes.c_int
        self.launch = packed_launch(lib, RunArgs, family)
        lib.cnm_max_active_clusters.argtypes = [i32] * 3
        lib.cnm_max_active_clusters.restype = i32
        self.lib = lib
        self.cfg = cfg
        self.family = family
        self.out_kind = 1 if types.out_dtype == "f32" else 0
        self.layout = LAYOUTS[cfg.mode]
        self.layout_key = (self.layout.__name__,)
        self.plans: dict[tuple[int, ...], tuple[int, int, int]] = {}

    def _plan(self, x: torch.Tensor, w, stride: int) -> tuple[int, int, int]:
        """:func:`plan` for this launch, computed once per (n, stride, pattern, device)."""
        key = (w.out_features, stride, w.pattern.n, w.pattern.m, x.get_device())
        got = self.plans.get(key)
        if got is None:
            info = device_info(x.device)
            got = self.plans[key] = plan(self.cfg, *key[:4], info.sm_count, info.capability >= (9, 0))
        return got

    def occupancy(self, x: torch.Tensor, w) -> dict[str, int]:
        """The launch a call on (x, w) makes, and whether it fits in one wave: split, piece, smem bytes, its
        clusters (row blocks) and how many clusters of that size the device holds at once."""
        split, piece, smem = self._plan(x, w, w.layout(self.layout_key, self.layout)[2])
        with torch.cuda.device(x.device):
            fits = self.lib.cnm_max_active_clusters(split, smem, self.out_kind)
        if fits < 0:
            check_status(-fits, self.family, (x.shape[0], w.out_features, x.shape[1]))
        return {"split": split, "piece": piece, "smem": smem, "clusters": -(-w.out_features // self.cfg.block_rows),
                "max_active_clusters": fits}

    def __call__(self, x: torch.Tensor, w, bias: torch.Tensor | None, y: torch.Tensor) -> None:
        # PDL, except on a weight's first call: its layout is written just before, and that launch must not overlap
        # its writer
        pdl = int(w.has_layout(self.layout_key))
        args, _ = self._args(x, w, bias, pdl)
        status = self.launch(ctypes.addressof(args), x.data_ptr(), y.data_ptr(), stream_of(x))
        if status:
            check_status(status, self.family, (x.shape[0], w.out_features, x.shape[1]))

    def steady(self, x: torch.Tensor, w, bias: torch.Tensor | None, y: torch.Tensor) -> Callable[..., None]:
        """This call's launch with its arguments packed once (after a first call: PDL on), for matmul to repeat."""
        args, keep = self._args(x, w, bias, 1)
        return steady_call(self.launch, ctypes.addressof(args), (args, *keep), self.family,
                           (x.shape[0], w.out_features, x.shape[1]))

    def index_arg(self, w, indices: torch.Tensor) -> int:
        """The kernel's ``vector`` argument: the rows that share one index row (decode24: the metadata's pitch)."""
        return w.vector if isinstance(w, NMWeight) else w.pattern.v if self.cfg.mode == 3 else 1

    def _args(self, x: torch.Tensor, w, bias: torch.Tensor | None, pdl: int) -> tuple[RunArgs, tuple]:
        """The packed arguments of a call on (x, w, bias) and the tensors they point into."""
        m, k = x.shape
        values, indices, stride = w.layout(self.layout_key, self.layout)
        vector = self.index_arg(w, indices)
        if self.cfg.mode == 2 and vector % 32:
            raise ShapeError(f"nm_decode mode 2 needs a vector that is a multiple of 32, got {vector}")
        split, piece, smem = self._plan(x, w, stride)
        args = RunArgs(values.data_ptr(), indices.data_ptr(), None if bias is None else bias.data_ptr(), m,
                       w.out_features, k, w.pattern.n, w.pattern.m, vector, stride, split, piece, smem, self.out_kind,
                       pdl)
        return args, (values, indices, bias)


FAMILY = _DecodeFamily()
"""N:M (vector % 32 == 0) and V:N:M (V % 32 == 0) decode on tensor cores: m = 1-16 tokens, weights streamed at
memory speed."""

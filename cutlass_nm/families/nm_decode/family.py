"""N:M and V:N:M decode: m = 1-16 tokens, weights streamed at memory speed.

Our own kernel (codegen/templates/nm_decode.cu): there is nothing in CUTLASS for a gather-by-index
GEMV. N, M and the index-sharing vector are launch arguments, so one binary serves every pattern.
Four modes (``Config.mode``): 0, lanes along k on CUDA cores (any vector, and V:N:M read as 2:M); 1, one
row per lane on CUDA cores; 2, a warp's 32 rows on tensor cores when 32 rows share their indices (the
format's default vector); 3, V:N:M on sparse tensor cores (a warp's 32 rows in one V-block). A CTA owns
``Config.block_rows`` weight rows; a cluster of ``split`` CTAs splits their nonzeros along k (split-K reduced
through distributed shared memory), so small n still fills the GPU. Each CTA stages the x columns its k-range
touches in shared memory, token-contiguous, in pieces that fit ``SMEM_BUDGET``.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...arch import HOPPER, target
from ...errors import ShapeError
from ...formats.nm import NMWeight, decode_layout, decode_mma_layout, decode_rows_layout
from ...formats.vnm import VNMWeight, decode_vnm_layout
from ...patterns import Pattern, parse_or_none
from ..base import Family, FamilyConfig, KernelTypes, Problem, half_inputs_only
from ..launch import check_status, device_info

ELEMENTS = {"f16": "__half", "bf16": "__nv_bfloat16"}
SMEM_BUDGET = 96 * 1024  # per CTA: two CTAs fit an SM's shared memory
MAX_ACCUMULATORS = 64  # fp32 sums per thread (rows x max_tokens) before registers spill
MAX_SPLIT = 8  # portable cluster size
MAX_FIXED = SMEM_BUDGET - 8 * 1024  # sums + rings: x pieces get the rest (>= one group of 256 columns x 16 tokens)
CTAS_PER_SM = 2  # split-K until the grid has this many CTAs per SM
LAYOUTS = {0: decode_layout, 1: decode_rows_layout, 2: decode_mma_layout, 3: decode_vnm_layout}  # each mode's


@dataclass(frozen=True, slots=True)
class Config(FamilyConfig):
    """Tokens handled per launch (accumulators per thread), warps per CTA, weight rows per warp, whether one
    token's x is also staged in shared memory (several tokens always are) or gathered straight from L1, how
    many chunks of 8 nonzeros each lane keeps in flight, and whether a warp's chunks are transposed through shared
    memory so that its lanes gather neighbouring x columns (all ``mode`` = 0: lanes along k). ``mode`` = 1 gives
    each lane one row and has all lanes walk the same chunks: with indices shared by >= 32 rows every x read is a
    broadcast. ``mode`` = 2 runs a warp's 32 rows on tensor cores (mma.m16n8k16 over 16 nonzero positions, x
    columns gathered by ldmatrix; needs vector % 32 == 0). Modes 1 and 2 are for the N:M format's default
    vector = 32. ``mode`` = 3 runs V:N:M weights (V % 32 == 0) on sparse tensor cores: mma.sp.m16n8k32 over 8
    groups, the warp's 32 rows sharing the V-block's 4 gathered columns per group. ``rows``, ``transpose`` and
    ``stage_x`` do not apply to modes 1-3. ``bulk`` = 1 (mode 2, sm_90) streams
    each warp's values by TMA bulk copies into a shared-memory ring of 2 x ``ahead`` steps instead of registers.
    ``split`` > 0 fixes the CTAs per cluster that split a row block's nonzeros along k (0: ``plan``'s rule; a
    launch argument, so it shares the binary). ``pdl`` = 1 launches with programmatic dependent launch (sm_90, a
    launch flag too): the weight stream starts while the previous kernel on the stream finishes; x is read after
    it completes. The first call on a weight, which builds its kernel layout just before, launches without it.
    ``prefetch`` > 0 (modes 2 and 3 without bulk; sm_90) keeps each warp's next ``prefetch`` steps requested into
    L2 by bulk prefetches, so DRAM streams while x is staged and deeper than the ``ahead`` steps in registers.
    ``min_ctas`` (modes 2 and 3) bounds registers so that that many CTAs fit an SM (0: the compiler's choice); with
    ``early_release`` = 1 a PDL launch lets the next kernel start as soon as this one does, not after its weight
    stream (measured within ±2 % on the H100, so not in the heuristic). ``max_ctas`` = C > 0 pads a CTA's shared
    memory so that at most C fit an SM (a launch argument: the same binary), which keeps a chain of PDL launches
    from stacking a call's CTAs 3 to an SM while others hold 1. ``wsplit`` = W (modes 2 and 3, values in
    registers) lets W warps share one 32-row block and split each x piece's steps, their sums added in shared
    memory: a CTA owns 32 x warps / W rows, so the grid fills the GPU with fewer CTAs per cluster (none at W =
    warps), at W times the staged x per CTA. Modes 2 and 3 below 8 tokens stage exactly ``max_tokens`` tokens of
    x (narrow x, B built from scalar shared loads instead of ldmatrix). ``push`` = 1 reduces a cluster's sums by
    pushing each CTA's sums into their owner's shared memory (``st.async``, an mbarrier per owner) instead of a
    cluster barrier and remote loads (sm_90 clusters; no effect at split 1)."""

    max_tokens: int = 16
    warps: int = 4
    rows: int = 1
    stage_x: int = 0
    ahead: int = 1
    transpose: int = 0
    mode: int = 0
    bulk: int = 0
    split: int = 0
    pdl: int = 0
    prefetch: int = 0
    min_ctas: int = 0
    early_release: int = 0
    max_ctas: int = 0
    wsplit: int = 1
    push: int = 0

    SPACE: ClassVar = {"max_tokens": (1, 2, 4, 8, 16), "warps": (2, 4, 8, 16), "rows": (1, 2, 4, 8),
                       "stage_x": (0, 1), "ahead": (1, 2, 4, 8),
                       "transpose": (0, 1), "mode": (0, 1, 2, 3), "bulk": (0, 1), "split": (0, 1, 2, 4, 8),
                       "pdl": (0, 1), "prefetch": (0, 4, 8, 16), "min_ctas": (0, 2, 3, 4), "early_release": (0, 1),
                       "max_ctas": (0, 2), "wsplit": (1, 2, 4, 8), "push": (0, 1)}

    @property
    def staged(self) -> bool:
        return self.max_tokens > 1 or bool(self.stage_x) or bool(self.mode)

    @property
    def block_rows(self) -> int:
        return self.warps * (32 if self.mode else self.rows) // self.wsplit

    @property
    def ring_bytes(self) -> int:
        """Shared memory of the bulk stream's rings: per warp 2·ahead steps of 1024 value + 16 index bytes and an
        8-byte barrier (the template's kRingBytes)."""
        return -(-self.warps * 2 * self.ahead * 1048 // 16) * 16 if self.bulk else 0

    def estimate_ms(self, problem: Problem, sm_count: int = 132) -> float:
        """Estimate for ranking (tune.perfmodel): the stored weight (16-bit values and their index bytes) once per
        launch of ``max_tokens`` tokens, plus x and y, at copy bandwidth, times what the H100 sweeps measured of
        the choices (results/h100/nm_decode_*: tensor-core modes ~1.3x faster than the CUDA-core ones, 2 steps in
        flight best) and a fixed ~5 µs per launch, ~1 µs less with PDL."""
        p = parse_or_none(problem.pattern)
        keep, group = ((2, p.m) if p.is_vnm else (p.n, p.m)) if p is not None else (2, 8)
        launches = -(-problem.m // self.max_tokens)
        stream = launches * problem.n * problem.k * keep / group * 2.5 + problem.m * (problem.k + problem.n) * 2
        choice = (1.0 if self.mode in (2, 3) else 1.3) * (1.0 if self.ahead == 2 else 1.1)
        return (stream / HOPPER.bandwidth * choice + launches * (4e-6 if self.pdl else 5e-6)) * 1e3

    @property
    def unit(self) -> int:
        """Nonzero positions per step of a row: 8 (16-byte loads), 16 on tensor cores (one mma k-step)."""
        return 16 if self.mode >= 2 else 8


def fixed_smem(cfg: Config) -> int:
    """Shared memory a CTA needs besides staged x: the fp32 sums (16-byte aligned), mode 0's transpose buffers
    (2-byte values + 1-byte indices), the bulk stream's rings and the push reduction's receive slots."""
    red = -(-cfg.block_rows * cfg.wsplit * cfg.max_tokens * 4 // 16) * 16  # one slot per warp and row
    red += cfg.block_rows * cfg.max_tokens * 4 + 128 if cfg.push else 0  # push: receive slots and their mbarrier
    red += cfg.warps * cfg.rows * 256 * 3 if cfg.transpose else 0
    return red + cfg.ring_bytes


@functools.lru_cache(maxsize=4096)
def plan(cfg: Config, n: int, stride: int, keep: int, group: int, sm_count: int, clusters: bool = True
         ) -> tuple[int, int, int]:
    """(split, piece, smem_bytes) for a launch: split-K (a cluster, sm_90+) until the grid fills ``CTAS_PER_SM``
    CTAs per SM, or ``cfg.split`` when set, while each CTA keeps >= 32 chunks of a row in mode 0, >= 4 in modes 1
    and 2; and x pieces of ``piece`` chunks that fit the budget."""
    block_rows = cfg.block_rows
    chunks = stride // cfg.unit
    blocks = -(-n // block_rows)
    split = 1
    # mode 0 splits a row's chunks over 32 lanes (>= 32 per CTA); modes 1 and 2 walk them per lane (>= 4)
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
    # mode 1 stages fp32, the others max_tokens of fp16 (modes 2 and 3: 8 or 16 for ldmatrix, fewer narrow); from
    # the 8-aligned column below, 8 columns per load
    col_bytes = (4 if cfg.mode == 1 else 2) * cfg.max_tokens
    slack = 16 if cfg.mode else 0
    cap = min(need, (SMEM_BUDGET - red) // col_bytes - slack)
    piece = min(per_cta, (cap // group - 1) * keep // cfg.unit)
    if piece < 1:
        raise ShapeError(f"nm_decode: a group of {group} columns does not fit the shared-memory budget")
    return split, piece, max(red + (cap + slack) * col_bytes, capped_smem(cfg))


def capped_smem(cfg: Config) -> int:
    """The shared memory that lets at most ``cfg.max_ctas`` CTAs share an H100 SM (1 KB per CTA is reserved), or 0.
    An sm_80 SM has less, so the cap holds there too."""
    return target().smem_per_sm // (cfg.max_ctas + 1) - 1024 + 16 if cfg.max_ctas else 0


class _DecodeFamily(Family):
    name = "nm_decode"
    arch = "sm_80"
    weight = NMWeight
    also_runs = (VNMWeight,)  # mode 3 (sparse tensor cores), or mode 0 reading it as element-wise 2:M
    Config = Config
    templates = ("families/nm_decode/kernel.cu",)

    def check(self, cfg: Config, problem: Problem) -> str | None:
        if (reason := half_inputs_only(problem.types)) is not None:
            return reason
        if problem.m > cfg.max_tokens:
            return f"m={problem.m} exceeds this config's max_tokens={cfg.max_tokens} (the decode path takes m <= 16)"
        if problem.types.out_dtype not in ("f32", problem.types.dtype):
            return "output must be the input dtype or f32"
        if cfg.transpose and cfg.rows > 4:
            return "transpose takes at most 4 rows per warp (its shared-memory buffers)"
        if cfg.max_tokens > 1 and cfg.stage_x:
            return "several tokens always stage x: stage_x=1 would rebuild the stage_x=0 kernel"
        if cfg.mode and (cfg.rows != 1 or cfg.transpose or cfg.stage_x):
            return f"mode={cfg.mode} gives a warp 32 rows and always stages x: rows=1, transpose=0, stage_x=0"
        if cfg.bulk and cfg.mode != 2:
            return "bulk=1 streams mode 2's values (tensor cores): it needs mode=2"
        if cfg.prefetch and (cfg.mode < 2 or cfg.bulk):
            return "prefetch keeps the register stream of modes 2 and 3 ahead in L2: it needs mode 2 or 3, bulk=0"
        if (cfg.min_ctas or cfg.early_release) and cfg.mode < 2:
            return "min_ctas and early_release apply to the tensor-core modes 2 and 3"
        if cfg.early_release and not cfg.pdl:
            return "early_release only matters under programmatic dependent launch: it needs pdl=1"
        if cfg.wsplit > 1 and (cfg.mode < 2 or cfg.bulk or cfg.warps % cfg.wsplit):
            return (f"wsplit={cfg.wsplit} (warps sharing a 32-row block) needs mode 2 or 3 with values in registers "
                    f"(bulk=0) and warps a multiple of it, got mode={cfg.mode}, bulk={cfg.bulk}, warps={cfg.warps}")
        if cfg.max_ctas and cfg.min_ctas > cfg.max_ctas:
            return f"min_ctas={cfg.min_ctas} asks for more CTAs per SM than max_ctas={cfg.max_ctas} lets fit"
        if cfg.min_ctas * cfg.warps > 32:  # 65536 registers per SM / (64 per thread x 32 lanes)
            return (f"{cfg.min_ctas} CTAs of {cfg.warps} warps per SM leave fewer than 64 registers per thread "
                    "(the kernel would spill)")
        if fixed_smem(cfg) > MAX_FIXED:
            return (f"{fixed_smem(cfg)} bytes of sums and bulk rings ({cfg.warps} warps, {cfg.max_tokens} tokens, "
                    f"ahead {cfg.ahead}) leave too little of the {SMEM_BUDGET}-byte budget for staged x")
        if cfg.ahead == 8 and not cfg.mode:
            return "ahead=8 only with modes 1-3 (rows x chunks in flight would take too many registers)"
        pattern = Pattern.parse(problem.pattern)
        if cfg.mode == 3 and (not pattern.is_vnm or pattern.v % 32):
            return f"mode=3 (sparse tensor cores) needs a V:N:M weight with V % 32 == 0, got {problem.pattern}"
        if cfg.mode == 2 and (pattern.is_vnm or not problem.vector or problem.vector % 32):
            return ("mode=2 (tensor cores) needs an N:M weight whose vector of rows sharing positions is a multiple "
                    f"of 32, got vector {problem.vector or 'unknown'} ({problem.pattern})")
        if cfg.rows * cfg.max_tokens > MAX_ACCUMULATORS:
            return f"rows x max_tokens = {cfg.rows * cfg.max_tokens} accumulators per thread > {MAX_ACCUMULATORS}"
        return None

    def source(self, cfg: Config, types: KernelTypes) -> str:
        template = self.template(self.templates[0])
        return template.substitute(element=ELEMENTS[types.dtype], max_tokens=int(cfg.max_tokens),
                                                   warps=int(cfg.warps), rows=int(cfg.rows),
                                                   stage_x=int(cfg.staged), ahead=int(cfg.ahead),
                                                   transpose="true" if cfg.transpose else "false",
                                                   mode=int(cfg.mode), bulk=int(cfg.bulk),
                                                   prefetch=int(cfg.prefetch), min_ctas=int(cfg.min_ctas),
                                                   early_release="true" if cfg.early_release else "false",
                                                   wsplit=int(cfg.wsplit),
                                                   push="true" if cfg.push else "false")

    def heuristic(self, problem: Problem) -> Config:
        """V:N:M weights: sparse tensor cores (mode 3), 8 warps, 2 steps in flight, one kernel for 1-8 tokens and
        one for 9-16 (1.1-1.6x faster than mode 0 and vnm_sm90 at 1-16 tokens on the LLaMA shapes). Modes 2 and 3
        bound registers to 3 CTAs per SM (1.35-1.43x at 16 tokens, where 88 registers cost a second wave); mode 2's
        register stream keeps 4 steps ahead in L2 (0-5 %).
        N:M with indices shared by a multiple of 32 rows (the format's default): tensor cores (mode 2), one kernel
        for 1-8 tokens and one for 9-16, 8 warps and 2 steps in flight, launched with programmatic dependent
        launch; below 2^25 weights the values come by TMA bulk copies (results/h100/nm_decode_sweep_launch.json:
        at 4096² 6.7-12.6 µs, 10-20 % under the previous 16-warp choices; at 8192² registers, bulk rings cost
        CTAs per SM there) and at most 2 CTAs share an SM (ab_nm_decode_cap_check_40bd8b4.json: 1-14 %).
        Modes 2 and 3 at one token on at least 2048 rows and 2^24 weights: one staged token and the 8 warps of a
        CTA splitting one 32-row block's k, so no cross-CTA reduction where the row blocks alone fill the GPU, and
        clusters of 2-4 where they do not (results/h100/NOTES.md, 2026-11-30); N:M there at k <= 4096 or in a
        cluster also lets the next PDL call launch at entry (`early_release`). Clusters reduce their sums by
        pushing them to each sum's owner (`push`) at one token, for V:N:M, and for N:M below 2^25 weights
        (0.89-0.97x there; mixed above).
        Otherwise lanes along k (mode 0): large CTAs (x staging amortized over many rows), fewer rows per warp as
        accumulators grow; one token: transposed gathers at >= 75 % sparsity, small CTAs
        below 2^25 weights (results/h100/nm_decode_sweep_m1.json); PDL too (each mode issues its first weight
        loads before waiting for x)."""
        pattern = Pattern.parse(problem.pattern)
        small = problem.n * problem.k < 1 << 25
        mma_tokens = 8 if problem.m <= 8 else 16
        vnm_mma = pattern.is_vnm and pattern.v % 32 == 0
        shared_mma = not pattern.is_vnm and bool(problem.vector) and problem.vector % 32 == 0
        if (vnm_mma or shared_mma) and problem.m == 1 and problem.n * problem.k >= 1 << 24 and problem.n >= 2048:
            # one token: narrow x, 8 warps on each 32-row block, one step in registers, 4 CTAs per SM where n / 32
            # CTAs exceed 3 per SM of an H100 (mode 2: ab_nm_decode_wsplit_check_1b89cf1.json, 1.06-1.39x in all 12
            # cells at n·k >= 2^25; ab_nm_decode_wsplit_neighbours_b7e848d.json; mode 3:
            # ab_nm_decode_vnm_narrow_7e59e12.json, 1.25x). No cluster where the row blocks fill the GPU; below
            # that, clusters up to ~256 CTAs whose sums are pushed to their owner (mode 3:
            # ab_nm_decode_wsplit_clusters_4c1606d.json; mode 2 at 4096 rows only once pushed, 0.90-0.98x in all 10
            # cells against no cluster: ab_nm_decode_one_token_split_467fe9e.json). N:M at k <= 4096 or in a
            # cluster releases the next call at entry: its CTAs take the free slots and start their loads before
            # this call ends (ab_nm_decode_early_release_4aa85ea.json: 0.82-0.98x at k = 4096; without a cluster
            # mixed at k = 8192, 1.00-1.03x at 11008; in clusters of 2 at 4096 x 11008 0.86-0.93x; mode 3 0.96-1.04x)
            # N:M with 129-264 row blocks: a cluster of 2 too, 4 CTAs an SM in one wave (8192² 0.92-0.97x in all 5
            # cells; at 11008 rows, two waves, 1.13-1.30x: ab_nm_decode_one_token_split8192_30ee12f.json)
            blocks = -(-problem.n // 32)
            split = 1 << (min(MAX_SPLIT, max(1, 256 // blocks)).bit_length() - 1)
            if shared_mma and split == 1 and 2 * blocks <= 4 * target().sm_count:
                split = 2
            return Config(max_tokens=1, warps=8, ahead=1, mode=3 if vnm_mma else 2, pdl=1,
                          prefetch=0 if vnm_mma else 4, wsplit=8, split=split,
                          min_ctas=4 if blocks * split > 3 * target().sm_count else 3,
                          early_release=int(shared_mma and (problem.k <= 4096 or split > 1)), push=1)
        # results/h100/ab_nm_decode_e28a256.json: registers for 3 CTAs per SM (the 16-token kernel otherwise takes
        # 88 and its 256 CTAs at 8192² run in two waves); mode 2 keeps 4 steps ahead in L2 (mode 3 loses with it)
        # clusters reduce by pushing sums to their owner for V:N:M, and for N:M below 2^25 weights
        # (ab_nm_decode_push_47442c0.json: 0.89-0.97x where calls are short; 8192² N:M at 16 tokens 0.98-1.05x)
        if vnm_mma:  # results/h100/vnm_decode_e4c72cb.json: 8 warps, 2 steps
            return Config(max_tokens=mma_tokens, warps=8, ahead=2, mode=3, pdl=1, min_ctas=3, push=1)
        if shared_mma:
            # below 2^25 weights at most 2 CTAs per SM (results/h100/ab_nm_decode_max_ctas_ea3ebf0.json: 4096² 1-12 %
            # faster); above, the free third slot lets the next PDL call start early (capped: 27-51 % slower)
            return Config(max_tokens=mma_tokens, warps=8, ahead=2, mode=2, bulk=int(small), pdl=1,
                          min_ctas=2 if small else 3, max_ctas=2 if small else 0, prefetch=0 if small else 4,
                          push=int(small))
        tokens = next(t for t in Config.SPACE["max_tokens"] if t >= min(problem.m, 16))
        if tokens == 1:
            keep, group = (2, pattern.m) if pattern.is_vnm else (pattern.n, pattern.m)
            return Config(max_tokens=1, warps=4 if small else 16, rows=1, transpose=int(group >= 4 * keep), pdl=1)
        warps, rows = {2: (16, 1), 4: (16, 2), 8: (16, 2), 16: (16, 1)}[tokens]
        return Config(max_tokens=tokens, warps=warps, rows=rows, pdl=1)

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes) -> _Launcher:
        return _Launcher(lib, cfg, types)


class _Launcher:
    def __init__(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes) -> None:
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        lib.cnm_run.argtypes = [vp, vp, vp, vp, vp] + [i32] * 12 + [vp]
        lib.cnm_run.restype = i32
        lib.cnm_max_active_clusters.argtypes = [i32] * 3
        lib.cnm_max_active_clusters.restype = i32
        self.lib = lib
        self.cfg = cfg
        self.out_kind = 1 if types.out_dtype == "f32" else 0
        self.layout = LAYOUTS[cfg.mode]
        self.layout_key = (self.layout.__name__,)

    def _plan(self, x: torch.Tensor, w, stride: int) -> tuple[int, int, int]:
        info = device_info(x.device)
        return plan(self.cfg, w.out_features, stride, w.pattern.n, w.pattern.m, info.sm_count,
                    info.capability >= (9, 0))

    def occupancy(self, x: torch.Tensor, w) -> dict[str, int]:
        """The launch a call on (x, w) makes, and whether it fits in one wave: split, piece, smem bytes, its
        clusters (row blocks) and how many clusters of that size the device holds at once."""
        split, piece, smem = self._plan(x, w, w.layout(self.layout_key, self.layout)[2])
        with torch.cuda.device(x.device):
            fits = self.lib.cnm_max_active_clusters(split, smem, self.out_kind)
        if fits < 0:
            check_status(-fits, FAMILY.name, (x.shape[0], w.out_features, x.shape[1]))
        return {"split": split, "piece": piece, "smem": smem, "clusters": -(-w.out_features // self.cfg.block_rows),
                "max_active_clusters": fits}

    def __call__(self, x: torch.Tensor, w, bias: torch.Tensor | None, y: torch.Tensor) -> None:
        m, k = x.shape
        n, keep, group = w.out_features, w.pattern.n, w.pattern.m
        vector = w.vector if isinstance(w, NMWeight) else w.pattern.v if self.cfg.mode == 3 else 1
        if self.cfg.mode == 2 and vector % 32:
            raise ShapeError(f"nm_decode mode 2 needs a vector that is a multiple of 32, got {vector}")
        # the layout is built (written) on a weight's first call: that launch must not overlap its writer
        pdl = int(bool(self.cfg.pdl) and w.has_layout(self.layout_key))
        values, indices, stride = w.layout(self.layout_key, self.layout)
        split, piece, smem = self._plan(x, w, stride)
        stream = torch.cuda.current_stream(x.device).cuda_stream
        status = self.lib.cnm_run(x.data_ptr(), values.data_ptr(), indices.data_ptr(),
                                  None if bias is None else bias.data_ptr(), y.data_ptr(), m, n, k, keep, group,
                                  vector, stride, split, piece, smem, self.out_kind, pdl, stream)
        check_status(status, FAMILY.name, (m, w.out_features, k))


FAMILY = _DecodeFamily()

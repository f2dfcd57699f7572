"""General N:M SpMM on CUDA cores (issue 6): any 1 <= N < M <= 64, fp32 in/out, fp16/bf16 in with fp32
accumulate, for m > 16 tokens (the decode family takes fewer).

Our own kernel (codegen/templates/nm_simt.cu): CUTLASS has no gather-by-index SIMT GEMM; we use its
cp.async wrappers. A CTA owns ``block_rows`` rows of W x ``block_tokens`` tokens and walks k in tiles of
whole M-groups (about ``k_cols`` dense columns of x, staged in shared memory by a ``stages``-deep cp.async
pipeline; the tile's kept weights follow, compressed-k major). A thread keeps ``thread_rows`` x
``thread_tokens`` accumulators; because the kept positions are shared by a ``vector`` of rows (format
default 32 = the rows a warp owns at thread_rows = 8), every thread needs one column per step and a warp's
row groups read x as a broadcast. ``split_k`` > 1 splits k over CTAs and reduces in a second kernel.
N, M and the vector are launch arguments: one binary serves every pattern. fp16/bf16 x is widened to fp32
in a workspace first (a pass over x, small beside the GEMM). With ``x_transposed`` = 1 that pass writes xᵀ
(k x m) instead, for fp32 too, so a k-tile is staged column-major and a thread reads its tokens as float4s
(2 shared-memory loads per 8 tokens instead of 8 scalar loads). ``compact`` = 1 (with ``x_transposed``) stages
only the rows of xᵀ that the CTA's rows use: a k-tile spans as many M-groups as keep the union of its vectors'
columns within ``k_cols`` rows (and its kept steps within ``k_cols`` / min(4, vectors a CTA)), so at high
sparsity a k-tile holds 2-3x more kept steps for the same shared memory, and with one vector a CTA (vector a
multiple of block_rows) as many steps as staged rows (compact_layout). ``tma`` = 1 (with ``x_transposed``, on sm_90)
fills each stage's xᵀ tile and kept weights by two TMA copies from one lane of a producer warp (the warp's lanes copy
the column indices), completing on a per-stage full mbarrier; computing warps release stages on per-stage empty
mbarriers instead of a CTA-wide barrier per k-tile. At one CTA per SM the producer is a warpgroup of its own that
hands its registers to the computing warps (setmaxnreg), else computing warp 0. ``fuse_x`` = 1 (with that producer
warpgroup; fp32 x) drops the separate transpose kernel: the group's three idle warps transpose x into the xᵀ
workspace during the GEMM, piece by piece in k order, and the TMA warp waits for each chunk's pieces (H100: correct,
and 1.00-1.47x slower than the same config with the transpose kernel on every shape timed, results/h100/NOTES.md;
a tuner option, not in the heuristic). ``split_reduce`` = 1 sums split-K partials by atomics into the fp32 output
instead of a second kernel; ``split_reduce`` = 2 launches a split's CTAs as one thread block cluster (sm_90; before,
it runs as 0): each CTA parks its tile of sums in its freed stage memory and sums a 1 / split slice of the tile over
the cluster's shared memories (DSMEM) straight into y: no partials, no memset, deterministic, any output type.
``split_reduce`` = 3 splits only the last partial wave: with T CTA tiles and S CTAs resident at once, the first
floor(T / S) x S tiles run their whole k and store, the remaining tiles split k ``split_k`` ways and add by atomics
as with 1 (only their token rows of y are zeroed); T <= S: as 1. A wave-quantized shape (2048 x 11008 at 128 x 256
tiles: 688 tiles, 5.2 waves run as 6) then runs 5 + 1/4 waves instead of 6, with a fraction of split 1's atomics.
``k_warps`` = 2 puts two groups of warps on one CTA tile, each taking half of every k-tile's kept steps; group 1's
sums reach group 0 through the freed stage memory after the k loop (half the outputs a CTA at the same thread tile:
small calls fill the GPU with fewer splits of k across CTAs; H100: faster on 256-token rows where 128 x 128 tiles in
two splits fill the GPU, slower elsewhere, results/h100/NOTES.md stop 33; the heuristic takes it only there).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, replace
from functools import partial
from typing import ClassVar

import torch

from ...arch import HOPPER, target
from ...errors import LaunchError
from ...formats.nm import VECTORS, NMWeight
from ...patterns import Pattern, parse_or_none
from ..base import Family, FamilyConfig, KernelTypes, Problem
from ..launch import check_status, workspace

ELEMENTS = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float"}
MAX_REGS = 65536
ROW_PAD = 256  # the layout pads rows to a multiple of the largest block_rows


@dataclass(frozen=True, slots=True)
class Config(FamilyConfig):
    """CTA tile (W rows x tokens), thread tile, k-tile width in dense columns (compact: in staged rows of xᵀ),
    pipeline depth, split-K, whether x is transposed first (x_transposed: float4 token reads from a column-major x
    tile), whether that tile holds only the columns the CTA's rows use (compact, needs x_transposed) and whether
    TMA fills the stages (tma, needs x_transposed, not compact; sm_90, cp.async elsewhere). With split_k > 1, how the
    splits are summed (split_reduce): 0 = partial sums in a workspace and a second kernel (deterministic, any output
    type), 1 = each split adds its sums into a zeroed fp32 output by vector atomics (no second pass or partials;
    the order of the fp32 additions is not fixed), 2 = the split's CTAs form a thread block cluster and sum the tile
    through distributed shared memory (deterministic, any output type; GPUs before sm_90 run it as 0), 3 = as 1 for
    the tiles of the last partial wave of CTAs only, the full waves' tiles unsplit (fp32 output). k_warps: groups of
    warps that split every k-tile's steps over the same CTA tile (summed in shared memory after the k loop). chain:
    8 x 16 thread tiles (tma, one k group) also chain their k-tiles (a tile's last steps read the next tile's first)."""

    block_rows: int = 128
    block_tokens: int = 128
    thread_rows: int = 8
    thread_tokens: int = 8
    k_cols: int = 32
    stages: int = 3
    split_k: int = 1
    x_transposed: int = 0
    compact: int = 0
    tma: int = 0
    split_reduce: int = 0
    fuse_x: int = 0
    k_warps: int = 1
    chain: int = 0

    SPACE: ClassVar = {"block_rows": (32, 64, 128, 256), "block_tokens": (32, 64, 128, 256),
                       "thread_rows": (4, 8, 16), "thread_tokens": (4, 8, 16), "k_cols": (16, 32, 64, 96, 128),
                       "stages": (2, 3, 4, 5), "split_k": (1, 2, 3, 4, 8),
                       # x_transposed = 1 passed its H100 GPU tests (results/h100/gpu_tests_nm.log); timed by the tuner
                       "x_transposed": (0, 1), "compact": (0, 1), "tma": (0, 1), "split_reduce": (0, 1, 2, 3),
                       # 1: x transposed inside the GEMM by the producer warpgroup (H100: slower on every shape)
                       "fuse_x": (0, 1),
                       # 2: two groups of warps split each k-tile's steps and sum the tile in shared memory
                       "k_warps": (1, 2),
                       # 1: 8 x 16 thread tiles chain their k-tiles as 16 x 8 ones always do (tma, one k group)
                       "chain": (0, 1)}

    @property
    def threads(self) -> int:
        return (self.block_rows // self.thread_rows) * (self.block_tokens // self.thread_tokens) * self.k_warps

    def estimate_ms(self, problem: Problem, sm_count: int = HOPPER.sm_count, density: float = 0.5) -> float:
        """Roofline-style estimate for ranking (tune.perfmodel): CTA waves x FMA time at the CUDA-core rate,
        discounted by the shared-memory loads per FMA of the thread tile, or L2 traffic, whichever is larger."""
        m, n, k = problem.m, problem.n, problem.k
        resident = max(1, min(HOPPER.smem_per_block // max(1, smem_bound(self, problem.pattern, problem.vector)),
                               2048 // self.threads))
        slots = sm_count * resident
        base = -(-n // self.block_rows) * -(-m // self.block_tokens)
        whole = base // slots * slots if self.split_reduce == 3 and self.split_k > 1 and base > slots else 0
        tiles = (base - whole) * self.split_k  # split_reduce 3: only the last partial wave's tiles split
        waves = (whole // slots * self.split_k + -(-tiles // slots)) * resident  # in split tiles' times
        acc = self.thread_rows * self.thread_tokens
        issue = acc / (acc + self.thread_tokens + self.thread_rows / 4 + 3)
        rate = HOPPER.simt_flops / sm_count
        per_tile = 2.0 * self.block_rows * self.block_tokens * k / self.split_k * density / rate
        l2 = (m * k * 4 * -(-n // self.block_rows) + n * k * density * 4 * -(-m // self.block_tokens)) / 7e12
        reduce = m * n * 4 * (self.split_k + 1) / 3e12 * (base - whole) / base if self.split_k > 1 else 0.0
        return (max(waves * per_tile / issue, l2) * (1 + 1 / self.stages) + reduce) * 1e3


MAX_GROUP = 64  # the largest M the kernel's launcher accepts


def smem_bound(cfg: Config, pattern: str = "", vector: int = 0) -> int:
    """Shared memory the launcher (cnm_run, codegen/templates/nm_simt.cu) asks for with this config, computed as
    it does: ``stages`` x one stage rounded up to 128 B, a stage being the k-tile of ``pattern`` (whole M-groups,
    kgroups_for: ktd dense columns, ktc kept steps) as x + kept weights (ktc x block_rows) + column indices.
    x is column-major ktd x (block_tokens + 4) when x_transposed and the fast path applies (k-tile within
    k_cols, ``vector`` >= thread_rows), else token-major block_tokens x pitch: the fast pitch k_cols + 4 (taken
    when x is 16-byte aligned, the larger) or the general ceil8(ktd) + 4. The column indices are one row of ktc
    ints per ``vector`` of the CTA's rows: block_rows / vector rows (at least 1), so vector-1 weights stage 32x
    the indices of vector-32 ones. ``vector`` 0 (unknown): the largest over the format's vectors, so an unknown
    vector never under-counts. Without a pattern: the worst case of density N/M <= 1/2 within k_cols. With
    ``split_reduce`` = 2 the CTA's tile of sums (block_rows x block_tokens floats) reuses the stages' memory after the
    k loop (as with ``k_warps`` > 1, whose groups sum there): the larger of the two. Exact against sm_90's limit
    (``arch.target()``); the launcher re-checks against the GPU.

    The tuning DB's problem key has no vector, so a winner tuned on vector-32 weights is also offered for
    vector-1 weights of the same shape: rather than adding the vector to the key (a migration), this exact
    bound makes ``check`` refuse such a winner and dispatch falls back to the heuristic."""
    if vector < 1:
        return max(smem_bound(cfg, pattern, v) for v in VECTORS)
    pat = parse_or_none(pattern)  # None: the worst case
    if pat is None or pat.v is not None:
        ktd, ktc = cfg.k_cols, cfg.k_cols // 2
    elif cfg.compact:  # k_cols rows of xᵀ, at most compact_steps kept steps (compact_layout)
        ktd, ktc = cfg.k_cols, compact_steps(pat.n, cfg.k_cols, cta_vectors(cfg.block_rows, vector))
    else:
        kg = kgroups_for(pat.m, cfg.k_cols)
        ktd, ktc = kg * pat.m, kg * pat.n
    fast = ktd <= cfg.k_cols and vector >= cfg.thread_rows  # the launcher's condition for modes 1 and 2
    if cfg.x_transposed and (fast or cfg.compact):  # mode 2 (compact: the launcher refuses anything else)
        x = ktd * (cfg.block_tokens + (0 if cfg.tma else 4)) * 4  # TMA boxes are unpadded
    else:  # mode 1 (aligned x, k and ktd multiples of 4) or mode 0
        pitch = cfg.k_cols + 4 if fast and ktd % 4 == 0 else -(-ktd // 8) * 8 + 4
        x = cfg.block_tokens * pitch * 4
    w = ktc * cfg.block_rows * 4
    index_rows = cfg.block_rows // vector if cfg.block_rows >= vector else 1  # the launcher's p.nvb
    cols = index_rows * ktc * 4
    stages = cfg.stages * -(-(x + w + cols) // 128) * 128
    summed = (cfg.split_reduce == 2 and cfg.split_k > 1) or cfg.k_warps > 1
    tile = cfg.block_rows * cfg.block_tokens * 4 if summed else 0
    return max(stages, tile) + (16 * cfg.stages if cfg.tma else 0)  # tma: 2 mbarriers per stage


def kgroups_for(m: int, k_cols: int) -> int:
    """M-groups per k-tile: the most that fit ``k_cols`` columns with a multiple of 4 columns (16-byte copies
    of x); else as many as fit (the kernel's general path), at least one."""
    for g in range(k_cols // m, 0, -1):
        if (g * m) % 4 == 0:
            return g
    return max(1, k_cols // m)


def compact_steps(keep: int, k_cols: int, vectors: int = 4) -> int:
    """The most kept steps a compact k-tile holds: whole groups of ``keep`` within k_cols / min(4, vectors) (at
    least one group), ``vectors`` being the index rows a CTA holds (block_rows / vector, at least 1). Their lists'
    union is at most ``vectors`` x the steps; with one vector a CTA it is exactly the steps, so the k-tile can keep
    as many steps as it stages rows (x bytes per FMA then those of a dense tile, whatever the sparsity)."""
    return max(1, k_cols // min(4, max(1, vectors)) // keep) * keep


def cta_vectors(block_rows: int, vector: int) -> int:
    """Index rows (vectors) a CTA of ``block_rows`` rows holds: at least 1; 4 (the old worst case) if unknown."""
    return max(1, block_rows // vector) if vector > 0 else 4


def compact_layout(w: NMWeight, block_rows: int, k_cols: int) -> tuple[torch.Tensor, ...]:
    """The compact kernel layout for CTAs of ``block_rows`` rows: (wt, cols, rows, n_pad, nnz_pad, kgroups).

    A k-tile is the largest whole number of M-groups, ``kgroups``, whose kept steps fit compact_steps and in which
    every CTA's rows (the vectors in its block) use at most ``k_cols`` distinct columns of x. ``rows`` [n_pad /
    block_rows][tiles][k_cols] int32 lists those columns per CTA and k-tile (ascending, -1 = none: zeros), and
    ``cols`` gives each kept weight's place in its CTA's list; ``wt`` is simt_layout's. Needs vector and
    block_rows to divide one another (a vector's columns then have one place per k-tile in every CTA it spans)."""
    rows_w, k = w.shape
    n, m, vec = w.pattern.n, w.pattern.m, w.vector
    if vec % block_rows and block_rows % vec:
        raise ValueError(f"compact layout: vector {vec} and block_rows {block_rows} must divide one another")
    if m > k_cols:
        raise ValueError(f"compact layout: a group of {m} columns does not fit {k_cols} staged rows")
    groups = -(-k // m)
    n_pad = -(-rows_w // ROW_PAD) * ROW_PAD
    nvec, ncta = n_pad // vec, n_pad // block_rows
    idx = torch.zeros(nvec, groups, n, dtype=torch.long, device=w.device)
    idx[: w.indices.shape[0]] = w.indices.view(-1, groups, n).long()
    used_vec = torch.zeros(nvec, groups, m, dtype=torch.bool, device=w.device)
    used_vec.scatter_(2, idx, True)
    used_vec[w.indices.shape[0]:] = False  # padding vectors use nothing
    cta_of_vec = torch.arange(nvec, device=w.device) * vec // block_rows
    if vec >= block_rows:  # a vector spans vec / block_rows CTAs
        used = used_vec.repeat_interleave(vec // block_rows, dim=0)
    else:  # a CTA holds block_rows / vec vectors
        used = used_vec.view(ncta, block_rows // vec, groups, m).any(1)
    kg = max(1, compact_steps(n, k_cols, cta_vectors(block_rows, vec)) // n)
    while True:  # the largest k-tile whose every CTA union fits k_cols rows
        tiles = -(-groups // kg)
        padded = torch.zeros(ncta, tiles * kg, m, dtype=torch.bool, device=w.device)
        padded[:, :groups] = used
        if kg == 1 or int(padded.view(ncta, tiles, kg * m).sum(-1).max()) <= k_cols:
            break
        kg -= 1
    flat = padded.view(ncta, tiles, kg * m)
    place = flat.int().cumsum(-1) - 1  # a used column's place in its CTA's list
    rows = torch.full((ncta, tiles, k_cols), -1, dtype=torch.int32, device=w.device)
    c, t, j = flat.nonzero(as_tuple=True)
    col = t * kg * m + j
    rows[c, t, place[c, t, j]] = torch.where(col < k, col, -1).int()
    wt, _, _, nnz_pad = simt_layout(w, kg)
    idx_pad = torch.zeros(nvec, tiles * kg, n, dtype=torch.long, device=w.device)
    idx_pad[:, :groups] = idx
    column = torch.arange(tiles * kg, device=w.device)[None, :, None] * m + idx_pad  # g * M + kept offset
    cols = place.view(ncta, -1)[cta_of_vec[:, None], column.view(nvec, -1)]
    cols = cols.clamp_min(0).int().contiguous()  # padding vectors (nothing used): place 0, weight 0
    return wt, cols, rows.contiguous(), n_pad, nnz_pad, kg


def simt_layout(w: NMWeight, kgroups: int) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Kernel layout: fp32 values transposed to [G_pad·N][n_pad] and int32 column-within-k-tile indices
    [n_pad / vector][G_pad·N], groups padded to a multiple of ``kgroups`` (padding weights are zero)."""
    rows, k = w.shape
    n, m = w.pattern.n, w.pattern.m
    groups = -(-k // m)
    gpad = -(-groups // kgroups) * kgroups
    n_pad = -(-rows // ROW_PAD) * ROW_PAD
    wt = torch.zeros(gpad * n, n_pad, dtype=torch.float32, device=w.device)
    wt[: groups * n, :rows] = w.values.float().T
    idx = torch.zeros(n_pad // w.vector, gpad, n, dtype=torch.int32, device=w.device)
    idx[: w.indices.shape[0], :groups] = w.indices.view(-1, groups, n).int()
    within = (torch.arange(gpad, device=w.device, dtype=torch.int32) % kgroups) * m
    cols = (idx + within[None, :, None]).reshape(n_pad // w.vector, gpad * n)
    return wt.contiguous(), cols.contiguous(), n_pad, gpad * n


def resident_slots(cfg: Config, sm_count: int = HOPPER.sm_count) -> int:
    """CTAs the heuristic counts as resident at once: one per SM, two for tiles of <= 64 accumulators a thread."""
    return sm_count * (2 if cfg.thread_rows * cfg.thread_tokens <= 64 else 1)


def tail_waves(tiles: int, slots: int, split: int) -> float:
    """Waves of CTAs, in whole tiles' times, of ``tiles`` CTA tiles with split_reduce = 3: the full waves whole, the
    last partial wave's tiles split ``split`` ways (ceil(tiles / slots) unsplit)."""
    whole = tiles // slots if tiles > slots else 0
    return whole + -(-(tiles - whole * slots) * split // slots) / split


def tail_split_for(cfg: Config, problem: Problem, sm_count: int = HOPPER.sm_count) -> int | None:
    """The split (2-4) with which split_reduce = 3 runs the config's tiles in the fewest waves, where that is at least
    5 % fewer than unsplit (None elsewhere: fewer tiles than slots, or a last wave nearly full). H100 (results/h100/
    NOTES.md, stop 34): the tail split won every n = 11008 row from 512 to 2048 tokens (7-13 % fewer waves predicted,
    0.89-0.99x the time) and lost 0-10 % where it saved < 5 % of the waves (its atomics, zeroing and shorter tiles)."""
    tiles = -(-problem.n // cfg.block_rows) * -(-problem.m // cfg.block_tokens)
    slots = resident_slots(cfg, sm_count)
    if tiles <= slots:
        return None
    waves, split = min((tail_waves(tiles, slots, s), s) for s in (2, 3, 4))
    return split if waves <= 0.95 * -(-tiles // slots) else None


def _split_for(cfg: Config, problem: Problem, sm_count: int = HOPPER.sm_count) -> int:
    """Split-K for the heuristic: the smallest split of 1-4 (at least 1024 columns of k each) whose CTAs fill their
    last wave to >= 85 %, else the one that fills it best. The heuristic's CTAs run one per SM (two for 8x8 tiles).
    H100 at 0d70abb: 86 CTAs (256 x 11008, 128-row tiles) ran 1.3 waves with split 2 and 1.95 with split 3, which
    took 16:32 there from 74.5 to 85.1 % of ideal (results/h100/NOTES.md)."""
    tiles = -(-problem.n // cfg.block_rows) * -(-problem.m // cfg.block_tokens)
    slots = resident_slots(cfg, sm_count)
    splits = [s for s in (1, 2, 3, 4) if s == 1 or problem.k >= 1024 * s]

    def fill(s: int) -> float:
        return tiles * s / (-(-tiles * s // slots) * slots)

    return next((s for s in splits if fill(s) >= 0.85), max(splits, key=fill))


def _compact_rule(cfg: Config, pat: Pattern | None, vector: int) -> str | None:
    """The reason ``compact`` = 1 (or ``tma`` = 1) cannot run this pattern and vector (None: it can, or both off)."""
    if cfg.tma and (not cfg.x_transposed or cfg.compact):
        return "tma=1 copies whole xᵀ tiles: it needs x_transposed=1 and compact=0"
    if not cfg.compact:
        return None
    if not cfg.x_transposed:
        return "compact=1 stages columns of the transposed x: it needs x_transposed=1"
    if pat is not None and pat.m > cfg.k_cols:
        return f"compact=1: a group of {pat.m} columns does not fit k_cols={cfg.k_cols} staged rows"
    if vector > 0 and vector < cfg.thread_rows:
        return f"compact=1 needs the vector ({vector}) >= thread_rows ({cfg.thread_rows})"
    if vector > 0 and vector % cfg.block_rows and cfg.block_rows % vector:
        return f"compact=1 needs vector {vector} and block_rows {cfg.block_rows} to divide one another"
    return None


def own_producer(cfg: Config) -> bool:
    """Whether the kernel fills its stages from a producer warpgroup of its own (the template's kOwnProducer): tma at
    one CTA per SM (more than 64 accumulators or more than 256 threads) with 128 or 256 computing threads."""
    one_cta = cfg.thread_rows * cfg.thread_tokens > 64 or cfg.threads > 256
    return bool(cfg.tma) and one_cta and cfg.threads in (128, 256)


def _chain_rule(cfg: Config) -> str | None:
    """The reason ``chain`` = 1 changes nothing (None: it applies, or it is off): only the TMA loop of one k group
    chains, and 16-row tiles always do, so it is a distinct kernel for 8 x 16 thread tiles only."""
    if cfg.chain and not (cfg.tma and cfg.k_warps == 1 and (cfg.thread_rows, cfg.thread_tokens) == (8, 16)):
        return "chain=1 applies to 8 x 16 thread tiles with tma=1 and k_warps=1 (16-row tiles always chain)"
    return None


def _fuse_rule(cfg: Config) -> str | None:
    """The reason ``fuse_x`` = 1 cannot build (None: it can, or it is off). fp32 x that is 16-byte aligned with k and
    the k-tile multiples of 4 is transposed in the GEMM; other inputs fall back to the transpose kernel."""
    if cfg.fuse_x and not own_producer(cfg):
        return ("fuse_x=1 transposes x in the producer warpgroup: it needs tma=1 at one CTA per SM (more than 64 "
                "accumulators a thread) with 128 or 256 computing threads")
    return None


class _SimtFamily(Family):
    name = "nm_simt"
    arch = "sm_80"
    weight = NMWeight
    Config = Config
    templates = ("families/nm_simt/kernel.cu",)
    input_dtypes = ("f32", "f16", "bf16")

    def check(self, cfg: Config, problem: Problem) -> str | None:
        t = problem.types
        if (pat := parse_or_none(problem.pattern)) is not None and pat.m > MAX_GROUP:
            return (f"pattern {problem.pattern}: nm_simt takes N:M with M <= {MAX_GROUP} (its launcher refuses larger "
                    f"groups); prune to a pattern with M <= {MAX_GROUP}")
        if t.out_dtype not in ("f32", t.dtype):
            return "output must be the input dtype or f32"
        if cfg.block_rows % (4 * cfg.thread_rows) or cfg.block_tokens % (8 * cfg.thread_tokens):
            return (f"a warp is 4 x {cfg.thread_rows} rows by 8 x {cfg.thread_tokens} tokens: block "
                    f"{cfg.block_rows}x{cfg.block_tokens} is not a whole number of warps")
        if not 64 <= cfg.threads <= 512:
            return f"{cfg.threads} threads per CTA (needs 64..512)"
        acc = cfg.thread_rows * cfg.thread_tokens
        if cfg.threads * (acc + cfg.thread_rows + cfg.thread_tokens + 40) > MAX_REGS:
            return f"{cfg.threads} threads x {acc} accumulators exceed the register file"
        if cfg.split_reduce and cfg.split_k == 1:
            return f"split_reduce={cfg.split_reduce} sums the splits of split-K: it needs split_k > 1"
        if cfg.split_reduce in (1, 3) and t.out_dtype != "f32":
            return f"split_reduce={cfg.split_reduce} adds the splits into an fp32 output: it needs out_dtype f32"
        if cfg.split_reduce == 3 and cfg.fuse_x:
            return "split_reduce=3 runs a 1-D grid of tiles; fuse_x=1 needs the 3-D one: use fuse_x=0"
        if (reason := _compact_rule(cfg, pat, problem.vector) or _fuse_rule(cfg) or _chain_rule(cfg)) is not None:
            return reason
        if (need := smem_bound(cfg, problem.pattern, problem.vector)) > (cap := target().smem_per_block):
            vector = f"vector {problem.vector}" if problem.vector > 0 else "the worst vector (unknown)"
            return (f"{cfg.stages} stages need {need} B of shared memory (> {cap}) for {problem.pattern}, "
                    f"{vector}")
        if problem.m < 1 or problem.n < 1 or problem.k < 1:
            return "m, n, k must be >= 1"
        return None

    def source(self, cfg: Config, types: KernelTypes) -> str:
        valid = Config.from_record(cfg.to_record())  # only validated ints reach the source
        fields = {name: int(getattr(valid, name)) for name in Config.SPACE}
        return self.template("families/nm_simt/kernel.cu").substitute(element=ELEMENTS[types.dtype], **fields)

    def heuristic(self, problem: Problem) -> Config:
        """TMA-filled stages of transposed x (H100 sweep at f38fb7d, benchmarks/results/h100/nm_simt_pipe_f38fb7d.json:
        tma = 1 was the fastest variant on all 55 swept shapes, by 1-11 %; where the GPU has no TMA the same binary runs
        cp.async). From 256 tokens: 256x128 CTAs of 16x8 thread tiles, 3 stages, for densities >= 3/8 (16:32, 12:32),
        else 128x256 CTAs of 8x16 tiles, 3 stages of 64 columns (8:32) or, at densities <= 1/8 from 1024 tokens, 2
        stages of 96 (4:32); below 256 tokens 256x64 CTAs of 8x8 tiles, 2 stages. From 256 to 511 tokens two warp groups
        split each k-tile of 128x128 CTAs of 8x16 tiles (k_warps = 2, 128 columns, 3 stages where they fit, else 2;
        _k_warps_tile), k split in two and summed in a cluster where that fills the waves to >= 95 %, else only the last
        partial wave split. H100 at 842990c (the acceptance sweep, nm_simt_plain_*_842990c.json, every one of these
        timed beside the older choices in the same run): the 3 dense stages 5-7 % faster than 2 from 1024 tokens (level
        below), the 96-column sparse tiles 0.5-3 % at 4:32, k_warps 8-22 % at 256 tokens with n = 4096 / 12288 (with 3
        stages where they fit, densities <= 1/8: 0.925-0.947x the 2-stage tile there, H100 at 61f526b,
        ab_nm_simt_kwarps3_61f526b.json; at k = 11008 too, where the b54122e sweep's 256-token winner was this tile at
        16:32-2:8, 3-6 % under the previous heuristic's choice, nm_simt_plain_*_b54122e.json). The 8 x 16 tiles chain
        their k-tiles (chain = 1) from density 1/4 (H100 at d6750da: 0.4-4.4 % faster at 16:32 to 8:32, 3-5 % slower at
        4:32, ab_nm_simt_vmix_d6750da.json). k is split to fill the last wave of CTAs (_split_for); from 256 tokens two
        splits are summed in a thread block cluster (split_reduce = 2; H100 at 8b2f002, once stash_tile stopped pinning
        the accumulators' registers: faster than atomics or the partials pass on 8 of 11 two-split winners, by up to 6
        %, ab_nm_simt_stash_cluster_8b2f002.json; clusters of 3 or 4 whole-SM CTAs ran up to twice as long at 40e8f40,
        fewer of them fitting the GPU at once). Where the tiles overfill the GPU by a partial wave and splitting only
        that wave saves >= 5 % of the waves (tail_split_for; fp32 output), split_reduce = 3 with that split instead
        (H100 at 9d50b99: 0.89-0.99x the time on the n = 11008 rows of 512-2048 tokens,
        results/h100/ab_nm_simt_tail_9d50b99.json). Where the stages do not fit (vector 1 at dense patterns such as
        31:32 or 63:64), first 2 stages, then the CTA's rows are halved: the config fits every N:M with M <= 64."""
        pat = parse_or_none(problem.pattern)
        dense = pat is None or pat.n / pat.m >= 3 / 8
        if 256 <= problem.m < 512 and (kw := self._k_warps_tile(problem)) is not None:
            return kw
        if problem.m < 256:
            cfg = Config(block_rows=256, block_tokens=64, k_cols=64, stages=2)
        elif dense:
            cfg = Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=64, stages=3)
        elif pat is not None and pat.n / pat.m <= 1 / 8 and problem.m >= 1024:
            cfg = Config(block_rows=128, block_tokens=256, thread_tokens=16, k_cols=96, stages=2)
        else:  # chained k-tiles from density 1/4 (8:32, 1:4, 2:8)
            chain = int(pat is not None and pat.n / pat.m >= 1 / 4)
            cfg = Config(block_rows=128, block_tokens=256, thread_tokens=16, k_cols=64, stages=3, chain=chain)
        cfg = replace(cfg, x_transposed=1, tma=1)
        split = _split_for(cfg, problem)
        tiles, slots = -(-problem.n // cfg.block_rows) * -(-problem.m // cfg.block_tokens), resident_slots(cfg)
        tail = tail_split_for(cfg, problem)
        if tail is not None and tail_waves(tiles, slots, tail) <= 0.95 * -(-tiles * split // slots) / split:
            tailed = replace(cfg, split_k=tail, split_reduce=3)  # fp32 output only (check), else the split below
            if self.check(tailed, problem) is None:
                return tailed
        cfg = replace(cfg, split_k=split, split_reduce=2 if split == 2 and problem.m >= 256 else 0)

        def fits(c: Config) -> bool:
            return smem_bound(c, problem.pattern, problem.vector) <= target().smem_per_block

        if not fits(cfg):
            cfg = replace(cfg, stages=2)
        while not fits(cfg) and cfg.block_rows > 4 * cfg.thread_rows:  # keeps whole warps (and >= 64 threads)
            cfg = replace(cfg, block_rows=cfg.block_rows // 2)
        return cfg

    def _k_warps_tile(self, problem: Problem) -> Config | None:
        """The heuristic's tile at 256-511 tokens: 128 x 128 CTAs of two warp groups, 3 stages of 128 columns where
        they fit (densities <= 1/8), else 2; k split in two and summed in a cluster where that fills >= 95 % of the
        waves, else only the last partial wave split (tail_split_for; fp32 output). None: neither applies or fits.
        H100: the b54122e / e2af485 sweeps' 256-token winners at every density on 4096², 12288 x 4096 and 4096 x
        11008 (split in two) and 11008 x 4096 (last wave split 3) (results/h100/NOTES.md, stop 35)."""
        kw = Config(block_rows=128, block_tokens=128, thread_tokens=16, k_cols=128, k_warps=2, x_transposed=1, tma=1)
        halves = -(-problem.n // 128) * -(-problem.m // 128) * 2  # 128x128 CTAs split in two
        if halves / (-(-halves // (sms := target().sm_count)) * sms) >= 0.95:
            kw = replace(kw, split_k=2, split_reduce=2)
        elif (tail := tail_split_for(kw, problem)) is not None:
            kw = replace(kw, split_k=tail, split_reduce=3)
        else:
            return None
        fitting = (c for c in (replace(kw, stages=3), replace(kw, stages=2)) if self.check(c, problem) is None)
        return next(fitting, None)  # None: the stages do not fit this vector, or a last-wave split not fp32 out

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes) -> _Launcher:
        return _Launcher(lib, cfg, types)


class _Launcher:
    def __init__(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes) -> None:
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        lib.cnm_run.argtypes = [vp, vp, vp, vp, vp, vp, vp] + [i32] * 11 + [vp]
        lib.cnm_run.restype = i32
        lib.cnm_workspace.argtypes = [i32, i32, i32]
        lib.cnm_workspace.restype = ctypes.c_longlong
        self.run, self.workspace = lib.cnm_run, lib.cnm_workspace
        self.cfg = cfg
        self.out_kind = 1 if types.out_dtype == "f32" and types.dtype != "f32" else 0

    def __call__(self, x: torch.Tensor, w: NMWeight, bias: torch.Tensor | None, y: torch.Tensor) -> None:
        m, k = x.shape
        n = w.out_features
        cfg, rows = self.cfg, None
        if cfg.compact:
            if (reason := _compact_rule(cfg, w.pattern, w.vector)) is not None:
                raise LaunchError(f"nm_simt: config {cfg.to_record()} cannot run this weight: {reason}")
            key = ("simt_compact", cfg.block_rows, cfg.k_cols)
            wt, cols, rows, n_pad, nnz_pad, kg = w.layout(key, partial(compact_layout, block_rows=cfg.block_rows,
                                                                      k_cols=cfg.k_cols))
        else:
            kg = kgroups_for(w.pattern.m, cfg.k_cols)
            wt, cols, n_pad, nnz_pad = w.layout(("simt", kg), partial(simt_layout, kgroups=kg))
        scratch = workspace(x.device, int(self.workspace(m, n, k)))
        stream = torch.cuda.current_stream(x.device).cuda_stream
        status = self.run(x.data_ptr(), wt.data_ptr(), cols.data_ptr(), None if rows is None else rows.data_ptr(),
                          None if bias is None else bias.data_ptr(),
                          y.data_ptr(), scratch, m, n, k, w.pattern.n, w.pattern.m, w.vector, kg, n_pad, nnz_pad,
                          self.out_kind, int(x.data_ptr() % 16 == 0), stream)
        if status == 3:
            raise LaunchError(f"nm_simt: config {self.cfg.to_record()} needs more shared memory than this GPU has "
                              f"for pattern {w.pattern} (k-tile of {kg} groups); use a smaller block or fewer stages")
        if status == 2:
            raise LaunchError(f"nm_simt: launcher refused the arguments (m, n, k) = ({m}, {n}, {k}), "
                              f"pattern {w.pattern}, vector {w.vector}")
        check_status(status, FAMILY.name, (m, n, k))


FAMILY = _SimtFamily()

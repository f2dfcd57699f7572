"""General N:M SpMM on CUDA cores: any 1 <= N < M <= 64, fp32 in/out or fp16/bf16 in with fp32 accumulate, for
m > 16 tokens (the decode family takes fewer).

Our own kernel (``kernel.cu`` beside this file; CUTLASS has no gather-by-index SIMT GEMM, we use its cp.async
wrappers). A CTA owns ``block_rows`` rows of W x ``block_tokens`` tokens and walks k in tiles of whole M-groups,
staged in shared memory by a ``stages``-deep pipeline; N, M and the vector (rows sharing kept positions) are launch
arguments, so one binary serves every pattern. :class:`Config` lists the knobs, :func:`smem_bound` the shared memory.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import ClassVar

import torch

from ...arch import HOPPER, target
from ...errors import LaunchError
from ...formats.nm import VECTORS, NMWeight
from ...patterns import parse_or_none
from ..base import Family, FamilyConfig, KernelTypes, Problem
from ..launch import call_scratch, check_status, packed_launch, steady_call, stream_of

ELEMENTS = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float"}
MAX_GROUP = 64  # the largest M the launcher accepts (substituted into the template)
MAX_THREADS_PER_SM = 2048


@dataclass(frozen=True, slots=True)
class Config(FamilyConfig):
    """CTA tile (W rows x tokens), thread tile, k-tile width in dense columns, pipeline depth and split-K.
    ``x_transposed``: x is transposed first (float4 token reads); ``tma``: TMA fills the stages (needs x_transposed;
    sm_90, cp.async elsewhere). ``split_reduce`` sums split-K by 0 = partials and a second kernel, 1 = fp32 atomics
    into y, 2 = a thread block cluster through DSMEM (sm_90; else as 0), 3 = atomics for the last partial wave's tiles
    only (fp32 out). ``k_warps`` = 2: two warp groups split each k-tile's steps; ``chain`` = 1: 8 x 16 thread tiles
    (tma, one k group) chain their k-tiles as 16-row tiles always do."""

    block_rows: int = 128
    block_tokens: int = 128
    thread_rows: int = 8
    thread_tokens: int = 8
    k_cols: int = 32
    stages: int = 3
    split_k: int = 1
    x_transposed: int = 0
    tma: int = 0
    split_reduce: int = 0
    k_warps: int = 1
    chain: int = 0

    SPACE: ClassVar = {"block_rows": (128, 256), "block_tokens": (64, 128, 256), "thread_rows": (8, 16),
                       "thread_tokens": (8, 16), "k_cols": (32, 64, 96, 128), "stages": (2, 3, 4, 5),
                       "split_k": (1, 2, 3, 4), "x_transposed": (0, 1), "tma": (0, 1), "split_reduce": (0, 1, 2, 3),
                       "k_warps": (1, 2), "chain": (0, 1)}

    @property
    def threads(self) -> int:
        return (self.block_rows // self.thread_rows) * (self.block_tokens // self.thread_tokens) * self.k_warps

    def estimate_ms(self, problem: Problem, sm_count: int = HOPPER.sm_count, density: float = 0.5) -> float:
        """Roofline-style estimate for ranking (families.perfmodel): CTA waves x FMA time at the CUDA-core rate,
        discounted by the shared-memory loads per FMA of the thread tile, or L2 traffic, whichever is larger."""
        m, n, k = problem.m, problem.n, problem.k
        resident = max(1, min(HOPPER.smem_per_block // max(1, smem_bound(self, problem.pattern, problem.vector)),
                               MAX_THREADS_PER_SM // self.threads))
        slots = sm_count * resident
        base = -(-n // self.block_rows) * -(-m // self.block_tokens)
        whole = base // slots * slots if self.split_reduce == 3 and self.split_k > 1 and base > slots else 0
        tiles = (base - whole) * self.split_k  # split_reduce 3: only the last partial wave's tiles split
        waves = (whole // slots * self.split_k + -(-tiles // slots)) * resident  # in split tiles' times
        acc = self.thread_rows * self.thread_tokens
        issue = acc / (acc + self.thread_tokens + self.thread_rows / 4 + 3)
        rate = HOPPER.simt_flops / sm_count
        per_tile = 2.0 * self.block_rows * self.block_tokens * k / self.split_k * density / rate
        l2_bytes = m * k * 4 * -(-n // self.block_rows) + n * k * density * 4 * -(-m // self.block_tokens)
        l2 = l2_bytes / HOPPER.l2_bandwidth
        reduce = m * n * 4 * (self.split_k + 1) / HOPPER.bandwidth * (base - whole) / base if self.split_k > 1 else 0.0
        return (max(waves * per_tile / issue, l2) * (1 + 1 / self.stages) + reduce) * 1e3


ROW_PAD = max(Config.SPACE["block_rows"])  # the layout pads rows to a multiple of every block_rows


# Per-config numbers the template is built with (substituted into it; it re-derives each by static_assert).
def ctas_per_sm(cfg: Config) -> int:
    """The kernel's launch bounds (kMinBlocks): 2 CTAs per SM for <= 64 accumulators a thread and <= 256 threads."""
    return 2 if cfg.thread_rows * cfg.thread_tokens <= 64 and cfg.threads <= 256 else 1


def producer_threads(cfg: Config) -> int:
    """kProducerThreads: 128 where a producer warpgroup of its own fills the TMA stages (one CTA per SM and 128 or
    256 computing threads), else 0 (computing warp 0 fills them)."""
    return 128 if cfg.tma and ctas_per_sm(cfg) == 1 and cfg.threads in (128, 256) else 0


def sum_tile_bytes(cfg: Config) -> int:
    """The CTA's tile of sums that reuses the stages' memory after the k loop (cluster split sums, k_warps)."""
    summed = (cfg.split_reduce == 2 and cfg.split_k > 1) or cfg.k_warps > 1
    return cfg.block_rows * cfg.block_tokens * 4 if summed else 0


def template_constants(cfg: Config) -> dict[str, int]:
    """Every derived number the template is built with: shared-memory pitches and terms, launch bounds."""
    return {"max_group": MAX_GROUP, "min_blocks": ctas_per_sm(cfg), "producer_threads": producer_threads(cfg),
            "pitch_fast": cfg.k_cols + 4, "pitch_t": cfg.block_tokens + (0 if cfg.tma else 4),
            "sum_tile_bytes": sum_tile_bytes(cfg), "barrier_bytes": 16 if cfg.tma else 0}


def smem_bound(cfg: Config, pattern: str = "", vector: int = 0) -> int:
    """Dynamic shared memory the launcher (``cnm_run``) asks for; the one statement of its formula:

        stage  = ceil128(x + W + cols), W = ktc * block_rows * 4, cols = max(1, block_rows / vector) * ktc * 4
        x      = ktd * pitch_t * 4            (mode 2: x_transposed, ktd <= k_cols and vector >= thread_rows)
               = block_tokens * pitch * 4     (pitch_fast if that applies and ktd % 4 == 0, else ceil8(ktd) + 4)
        smem   = max(stages * stage, sum_tile_bytes) + stages * barrier_bytes

    ktd, ktc: the k-tile's dense columns and kept steps, whole M-groups of the pattern (kgroups_for); the config's
    terms are ``template_constants``. N, M and the vector are launch arguments, so cnm_run recomputes this at run
    time and refuses a launch that does not fit. No pattern: density <= 1/2 within k_cols; ``vector`` 0 (unknown):
    the largest over the format's vectors, so a winner tuned on one vector is refused for one it does not fit."""
    if vector < 1:
        return max(smem_bound(cfg, pattern, v) for v in VECTORS)
    c = template_constants(cfg)
    pat = parse_or_none(pattern)  # None: the worst case
    if pat is None or pat.v is not None:
        ktd, ktc = cfg.k_cols, cfg.k_cols // 2
    else:
        kg = kgroups_for(pat.m, cfg.k_cols)
        ktd, ktc = kg * pat.m, kg * pat.n
    fast = ktd <= cfg.k_cols and vector >= cfg.thread_rows  # the launcher's condition for modes 1 and 2
    if cfg.x_transposed and fast:  # mode 2
        x = ktd * c["pitch_t"] * 4
    else:  # mode 1 (aligned x, k and ktd multiples of 4) or mode 0
        pitch = c["pitch_fast"] if fast and ktd % 4 == 0 else -(-ktd // 8) * 8 + 4
        x = cfg.block_tokens * pitch * 4
    w = ktc * cfg.block_rows * 4
    cols = max(1, cfg.block_rows // vector) * ktc * 4  # the launcher's p.nvb index rows
    stages = cfg.stages * -(-(x + w + cols) // 128) * 128
    return max(stages, c["sum_tile_bytes"]) + cfg.stages * c["barrier_bytes"]


def kgroups_for(m: int, k_cols: int) -> int:
    """M-groups per k-tile: the most that fit ``k_cols`` columns with a multiple of 4 columns (16-byte copies
    of x); else as many as fit (the kernel's general path), at least one."""
    for g in range(k_cols // m, 0, -1):
        if (g * m) % 4 == 0:
            return g
    return max(1, k_cols // m)


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
    """CTAs the heuristic counts as resident at once: the kernel's launch bounds (ctas_per_sm) on every SM."""
    return sm_count * ctas_per_sm(cfg)


def tail_waves(tiles: int, slots: int, split: int) -> float:
    """Waves of CTAs, in whole tiles' times, of ``tiles`` CTA tiles with split_reduce = 3: the full waves whole, the
    last partial wave's tiles split ``split`` ways (ceil(tiles / slots) unsplit)."""
    whole = tiles // slots if tiles > slots else 0
    return whole + -(-(tiles - whole * slots) * split // slots) / split


def tail_split_for(cfg: Config, problem: Problem, sm_count: int = HOPPER.sm_count) -> int | None:
    """The split (2-4) with which split_reduce = 3 runs the config's tiles in the fewest waves, where that is at least
    5 % fewer than unsplit; None where there are fewer tiles than slots or the last wave is nearly full."""
    tiles = -(-problem.n // cfg.block_rows) * -(-problem.m // cfg.block_tokens)
    slots = resident_slots(cfg, sm_count)
    if tiles <= slots:
        return None
    waves, split = min((tail_waves(tiles, slots, s), s) for s in (2, 3, 4))
    return split if waves <= 0.95 * -(-tiles // slots) else None


def _split_for(cfg: Config, problem: Problem, sm_count: int = HOPPER.sm_count) -> int:
    """Split-K for the heuristic: the smallest split of 1-4 (at least 1024 columns of k each) whose CTAs fill their
    last wave to >= 85 %, else the one that fills it best."""
    tiles = -(-problem.n // cfg.block_rows) * -(-problem.m // cfg.block_tokens)
    slots = resident_slots(cfg, sm_count)
    splits = [s for s in (1, 2, 3, 4) if s == 1 or problem.k >= 1024 * s]

    def fill(s: int) -> float:
        return tiles * s / (-(-tiles * s // slots) * slots)

    return next((s for s in splits if fill(s) >= 0.85), max(splits, key=fill))


def _tma_rule(cfg: Config) -> str | None:
    """The reason ``tma`` = 1 cannot build (None: it can, or it is off)."""
    if cfg.tma and not cfg.x_transposed:
        return "tma=1 copies whole xᵀ tiles: it needs x_transposed=1"
    return None


def _chain_rule(cfg: Config) -> str | None:
    """The reason ``chain`` = 1 changes nothing (None: it applies, or it is off): only the TMA loop of one k group
    chains, and 16-row tiles always do, so it is a distinct kernel for 8 x 16 thread tiles only."""
    if cfg.chain and not (cfg.tma and cfg.k_warps == 1 and (cfg.thread_rows, cfg.thread_tokens) == (8, 16)):
        return "chain=1 applies to 8 x 16 thread tiles with tma=1 and k_warps=1 (16-row tiles always chain)"
    return None


class _SimtFamily(Family):
    name = "nm_simt"
    arch = "sm_80"
    weight = NMWeight
    Config = Config
    templates = ("families/nm_simt/kernel.cu",)
    input_dtypes = ("f32", "f16", "bf16")

    def space(self) -> dict[str, tuple[int, ...]]:
        """Config.SPACE; on sm_90 without the untransposed and cp.async-filled variants (they lost to tma = 1 on
        every shape timed on an H100; elsewhere tma = 1 runs cp.async and untransposed x can win)."""
        if target().name != "sm_90":
            return Config.SPACE
        return {**Config.SPACE, "x_transposed": (1,), "tma": (1,)}

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
        if cfg.threads * (acc + cfg.thread_rows + cfg.thread_tokens + 40) > (regs := target().regs_per_sm):
            return f"{cfg.threads} threads x {acc} accumulators exceed the register file ({regs})"
        if cfg.split_reduce and cfg.split_k == 1:
            return f"split_reduce={cfg.split_reduce} sums the splits of split-K: it needs split_k > 1"
        if cfg.split_reduce in (1, 3) and t.out_dtype != "f32":
            return f"split_reduce={cfg.split_reduce} adds the splits into an fp32 output: it needs out_dtype f32"
        if (reason := _tma_rule(cfg) or _chain_rule(cfg)) is not None:
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
        return self.template("families/nm_simt/kernel.cu").substitute(element=ELEMENTS[types.dtype], **fields,
                                                                      **template_constants(valid))

    def heuristic(self, problem: Problem) -> Config:
        """TMA-filled stages of transposed x. 256-511 tokens: the k_warps tile (``_k_warps_tile``) where it applies.
        Else below 256 tokens 256 x 64 CTAs of 8 x 8 tiles, 2 stages; at densities >= 3/8 256 x 128 CTAs of 16 x 8
        tiles, 3 stages; sparser, 128 x 256 CTAs of 8 x 16 tiles (2 stages of 96 columns at <= 1/8 from 1024 tokens,
        else 3 of 64, chained from density 1/4). k is split to fill the last wave (two splits summed in a cluster
        from 256 tokens), or only the last partial wave where that saves >= 5 % of the waves (fp32 out). Where the
        stages do not fit the vector: 2 stages, then halved CTA rows."""
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
        """128 x 128 CTAs of two warp groups of 8 x 16 tiles, 128 columns, 3 stages where they fit, else 2; k split
        in two and summed in a cluster where that fills >= 95 % of the waves, else only the last partial wave split
        (fp32 out). None where neither applies or fits."""
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

    def bind(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes, helpers: Sequence[Callable] = ()) -> _Launcher:
        return _Launcher(lib, cfg, types)


class RunArgs(ctypes.Structure):
    """The template's ``RunArgs``: ``cnm_run``'s arguments but x, y, x's alignment and the stream."""

    _fields_ = [("wt", ctypes.c_void_p), ("cols", ctypes.c_void_p), ("bias", ctypes.c_void_p),
                ("workspace", ctypes.c_void_p)] + [
        (name, ctypes.c_int) for name in ("m", "n", "k", "keep", "group", "vector", "kgroups", "n_pad", "nnz_pad",
                                          "out_kind")]


class _Launcher:
    def __init__(self, lib: ctypes.CDLL, cfg: Config, types: KernelTypes) -> None:
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        lib.cnm_run.argtypes = [vp, vp, vp, vp, vp, vp] + [i32] * 11 + [vp]
        lib.cnm_run.restype = i32
        self.launch = packed_launch(lib, RunArgs, "nm_simt")
        lib.cnm_workspace.argtypes = [i32, i32, i32]
        lib.cnm_workspace.restype = ctypes.c_longlong
        self.run, self.workspace = lib.cnm_run, lib.cnm_workspace
        self.ws_bytes: dict[tuple[int, int, int], int] = {}  # (m, n, k) -> split-K scratch bytes, asked once
        self.cfg = cfg
        self.out_kind = 1 if types.out_dtype == "f32" and types.dtype != "f32" else 0

    def __call__(self, x: torch.Tensor, w: NMWeight, bias: torch.Tensor | None, y: torch.Tensor) -> None:
        m, k = x.shape
        n = w.out_features
        kg, (wt, cols, n_pad, nnz_pad), scratch = self._operands(x, w)
        scratch = None if scratch is None else scratch.data_ptr()
        stream = stream_of(x)
        status = self.run(x.data_ptr(), wt.data_ptr(), cols.data_ptr(), None if bias is None else bias.data_ptr(),
                          y.data_ptr(), scratch, m, n, k, w.pattern.n, w.pattern.m, w.vector, kg, n_pad, nnz_pad,
                          self.out_kind, int(x.data_ptr() % 16 == 0), stream)
        if status == 3:
            raise LaunchError(f"nm_simt: config {self.cfg.to_record()} needs more shared memory than this GPU has "
                              f"for pattern {w.pattern} (k-tile of {kg} groups); use a smaller block or fewer stages")
        if status == 2:
            raise LaunchError(f"nm_simt: launcher refused the arguments (m, n, k) = ({m}, {n}, {k}), "
                              f"pattern {w.pattern}, vector {w.vector}")
        check_status(status, FAMILY.name, (m, n, k))

    def steady(self, x: torch.Tensor, w: NMWeight, bias: torch.Tensor | None, y: torch.Tensor
               ) -> Callable[..., None]:
        """After a first call on (x, w, bias): its launch with every argument but x, y and the stream packed once
        (x 16-byte aligned, as matmul's steady state checks), for matmul to repeat; where it packs a workspace,
        only on that call's stream (whose workspace it is)."""
        m, k = x.shape
        n = w.out_features
        kg, (wt, cols, n_pad, nnz_pad), scratch = self._operands(x, w)
        args = RunArgs(wt.data_ptr(), cols.data_ptr(), None if bias is None else bias.data_ptr(),
                       None if scratch is None else scratch.data_ptr(), m, n, k, w.pattern.n, w.pattern.m, w.vector,
                       kg, n_pad, nnz_pad, self.out_kind)
        return steady_call(self.launch, ctypes.addressof(args), (args, wt, cols, bias, scratch), FAMILY.name,
                           (m, n, k), on=None if scratch is None else (stream_of(x), self))

    def _operands(self, x: torch.Tensor, w: NMWeight) -> tuple[int, tuple, torch.Tensor | None]:
        """A call's k-tile groups, the weight's layout for them (values, columns, padded n, padded nonzeros) and
        the workspace (split-K scratch, its size asked once per (m, n, k))."""
        m, k = x.shape
        n = w.out_features
        kg = kgroups_for(w.pattern.m, self.cfg.k_cols)
        layout = w.layout(("simt", kg), partial(simt_layout, kgroups=kg))
        nbytes = self.ws_bytes.get((m, n, k))
        if nbytes is None:
            nbytes = self.ws_bytes[(m, n, k)] = int(self.workspace(m, n, k))
        return kg, layout, call_scratch(x.device, nbytes)


FAMILY = _SimtFamily()

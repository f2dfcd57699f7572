"""V:N:M (VENOM) weights: every block of V rows keeps the same 4 columns of each group of M, and each
row keeps 2 of those 4 (2:4), so any sparsity 1 - 2/M runs on 2:4 Sparse Tensor Cores.

Canonical compressed form (kernel layouts derive from it):

* ``values``: ``rows x G·2`` (G = ceil(k / M) groups; k is zero-padded to G·M);
* ``columns``: ``ceil(rows / V) x G x 4`` uint8, the 4 kept column offsets (ascending) in each group;
* ``meta``: ``rows x G`` uint8, the 2:4 nibble over those 4 (positions ascending, as in ``sparse24``).

Column choice per (V-block, group) maximizes the kept magnitude Σ_rows top2(|w| over the 4 columns):
exactly, by trying every 4-subset, while C(M, 4) <= ``EXACT_LIMIT``; above it, by a fast method that
seeds with the 4 columns of largest block-wise magnitude and improves by single-column swaps.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import torch

from ..errors import InputError, ShapeError, SparsityError
from ..patterns import Pattern
from .meta_sm90 import PAD_NIBBLE
from .sparse24 import Sparse24Weight
from .weight import CompressedWeight, check_finite, check_not_empty

EXACT_LIMIT = 1820  # C(16, 4): exact search for M <= 16
_CHUNK_ELEMS = 1 << 24
CHUNK_BLOCKS = 64  # 32-row blocks decode_vnm_layout builds at once (2048 rows): its temporaries stay a few MB


@dataclass(eq=False)
class VNMWeight(CompressedWeight):
    values: torch.Tensor
    columns: torch.Tensor
    meta: torch.Tensor
    shape: tuple[int, int]
    pattern: Pattern

    @property
    def groups(self) -> int:
        return self.meta.shape[1]

    def to_dense(self) -> torch.Tensor:
        rows, k = self.shape
        m, g = self.pattern.m, self.groups
        cols = self.row_columns().long().reshape(rows, g, 2)  # within the group of M
        values = self.kept_values()
        out = torch.zeros(rows, g, m, dtype=values.dtype, device=values.device)
        out.scatter_(-1, cols, values.reshape(rows, g, 2))
        return out.reshape(rows, g * m)[:, :k]

    def gathered_24(self) -> Sparse24Weight:
        """The weight over its gathered columns: a ``rows x 4G`` 2:4 weight (the A operand the Sparse
        Tensor Core kernels run). Its values are this weight's own, shared; its metadata is packed from this
        weight's per-group nibbles (``meta``) into the 2:4 form."""
        return Sparse24Weight.from_groups(self.values, self.meta, (self.shape[0], 4 * self.groups))

    def gather_index(self) -> torch.Tensor:
        """int32 ``blocks x 4G``: the input column (of k zero-padded to G·M) that gathered column
        ``4g + j`` of a V-block reads, i.e. ``g·M + columns[block, g, j]``; ascending along each row."""
        g = torch.arange(self.groups, device=self.columns.device, dtype=torch.int32)
        return (g[None, :, None] * self.pattern.m + self.columns.int()).reshape(self.columns.shape[0], -1)

    def gathered_k(self, align: int) -> int:
        """The gathered K (4 per group) rounded up to a multiple of ``align``."""
        return -(-4 * self.groups // align) * align

    def padded_groups(self, align: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The gathered 2:4 weight's values (``rows x kg/2``) and per-group nibbles (``rows x kg/4``) with K
        zero-padded to kg = ``gathered_k(align)`` (padding groups carry valid metadata): what the kernels' layouts
        are built from. Where no padding is needed they are the weight's own tensors (no copy) when those are
        contiguous and 16-byte aligned."""
        rows, kg = self.shape[0], self.gathered_k(align)
        if kg == 4 * self.groups and all(t.is_contiguous() and not t.data_ptr() % 16 for t in (self.values, self.meta)):
            return self.values, self.meta
        values = torch.zeros(rows, kg // 2, dtype=self.dtype, device=self.device)
        values[:, : 2 * self.groups] = self.values
        meta = torch.full((rows, kg // 4), PAD_NIBBLE, dtype=torch.uint8, device=self.device)
        meta[:, : self.groups] = self.meta
        return values, meta

    def padded_24(self, align: int) -> Sparse24Weight:
        """``gathered_24()`` with K zero-padded to ``gathered_k(align)`` (``padded_groups``, packed)."""
        return Sparse24Weight.from_groups(*self.padded_groups(align), (self.shape[0], self.gathered_k(align)))

    def padded_gather_index(self, align: int, fill: int) -> torch.Tensor:
        """``gather_index()`` padded to ``gathered_k(align)`` columns with ``fill`` (contiguous int32)."""
        idx = self.gather_index()
        out = torch.full((idx.shape[0], self.gathered_k(align)), fill, dtype=torch.int32, device=idx.device)
        out[:, : idx.shape[1]] = idx
        return out

    def row_columns(self) -> torch.Tensor:
        """uint8 ``rows x 2G``: each kept value's column offset within its group of M, i.e. this weight read
        as element-wise 2:M (what the CUDA-core decode path streams)."""
        rows, v, groups = self.shape[0], self.pattern.v, self.groups
        blocks = self.columns.shape[0]
        nib = torch.zeros(blocks * v, groups, dtype=torch.uint8, device=self.meta.device)
        nib[:rows] = self.meta
        nib = nib.reshape(blocks, v, groups)
        cols = self.columns.unsqueeze(1)  # blocks x 1 x G x 4, broadcast over the block's rows
        out = torch.empty(blocks, v, groups, 2, dtype=torch.uint8, device=self.meta.device)
        for slot, pos in enumerate((nib & 3, (nib >> 2) & 3)):  # byte-sized temporaries, no int64 index
            picked = cols[..., 0].expand(blocks, v, groups)
            for j in (1, 2, 3):
                picked = torch.where(pos == j, cols[..., j], picked)
            out[..., slot] = picked
        return out.reshape(blocks * v, 2 * groups)[:rows]

    @property
    def padded_k(self) -> int:
        """k rounded up to whole groups of M: the length of the input rows the kernels gather from."""
        return self.groups * self.pattern.m

    def to(self, device: torch.device | str) -> VNMWeight:
        """Copy to another device (cached kernel layouts are rebuilt there on first use)."""
        return VNMWeight(self.values.to(device), self.columns.to(device), self.meta.to(device), self.shape,
                         self.pattern)


def _check(w: torch.Tensor, pattern: Pattern) -> None:
    if not pattern.is_vnm:
        raise InputError(f"{pattern} is not a V:N:M pattern")
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_floating_point():
        raise InputError("a V:N:M weight is a 2-D floating-point tensor (out_features x in_features)")
    check_not_empty(w)


def _grouped(w: torch.Tensor, pattern: Pattern) -> torch.Tensor:
    """|w| padded to (blocks·V) x (G·M), as blocks x V x G x M (float32)."""
    rows, k = w.shape
    v, m = pattern.v, pattern.m
    g, b = -(-k // m), -(-rows // v)
    a = torch.zeros(b * v, g * m, dtype=torch.float32, device=w.device)
    a[:rows, :k] = w.abs().float()
    return a.reshape(b, v, g, m)


@functools.cache
def _subset_pairs(m: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 4-column subsets of M (S x 4), the column pairs of M (first and second column, P each), and each
    subset's 6 pairs as pair indices (S x 6)."""
    subsets = list(itertools.combinations(range(m), 4))
    pairs = list(itertools.combinations(range(m), 2))
    index = {pair: i for i, pair in enumerate(pairs)}
    return (torch.tensor(subsets), torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs]),
            torch.tensor([[index[pair] for pair in itertools.combinations(sub, 2)] for sub in subsets]))


def _top2_score(a: torch.Tensor, m: int) -> torch.Tensor:
    """Σ over V of the top-2 of each row over each 4-column subset: a (B, V, G, M) -> (B, G, S). A row's top-2 sum
    over a subset is the largest sum of two of its columns, so it is a max over the subset's 6 pair sums (the same
    float32 sum as the two largest added: rounding keeps the order)."""
    _, first, second, subset_pairs = (t.to(a.device) for t in _subset_pairs(m))
    pair_sums = a[..., first] + a[..., second]  # B, V, G, P
    return pair_sums[..., subset_pairs].amax(-1).sum(1)


def _exact_columns(a: torch.Tensor, m: int) -> torch.Tensor:
    subsets = _subset_pairs(m)[0].to(a.device)
    b, v, g, _ = a.shape
    step = max(1, _CHUNK_ELEMS // (b * v * len(subsets) * 6))
    best = []
    for g0 in range(0, g, step):
        score = _top2_score(a[:, :, g0:g0 + step], m)
        best.append(subsets[score.argmax(-1)])
    return torch.cat(best, dim=1)  # B, G, 4


def _fast_columns(a: torch.Tensor, m: int, rounds: int = 2) -> torch.Tensor:
    """Seed with the 4 largest column sums, then try swapping each chosen column for each other one."""
    cols = a.sum(1).topk(4, dim=-1).indices.sort(-1).values  # B, G, 4
    b, _, g, _ = a.shape

    def score(c: torch.Tensor) -> torch.Tensor:
        picked = a.gather(-1, c.unsqueeze(1).expand(b, a.shape[1], g, 4))
        return picked.topk(2, dim=-1).values.sum(-1).sum(1)  # B, G

    current = score(cols)
    for _ in range(rounds):
        for slot in range(4):
            for cand in range(m):
                trial = cols.clone()
                trial[..., slot] = cand
                dup = (trial == cand).sum(-1) > 1
                s = score(trial).masked_fill(dup, -1.0)
                better = s > current
                cols = torch.where(better.unsqueeze(-1), trial, cols)
                current = torch.where(better, s, current)
    return cols.sort(-1).values


def select_columns(w: torch.Tensor, pattern: Pattern, exact: bool | None = None) -> torch.Tensor:
    """The 4 kept column offsets per (V-block, group): blocks x G x 4, ascending."""
    _check(w, pattern)
    check_finite(w)
    a = _grouped(w, pattern)
    use_exact = exact if exact is not None else len(list(itertools.combinations(range(pattern.m), 4))) <= EXACT_LIMIT
    cols = _exact_columns(a, pattern.m) if use_exact else _fast_columns(a, pattern.m)
    return cols.sort(-1).values


def mask_vnm(w: torch.Tensor, pattern: str | Pattern, exact: bool | None = None) -> torch.Tensor:
    """Boolean mask of the weights V:N:M keeps."""
    pattern = Pattern.parse(pattern)
    cols = select_columns(w, pattern, exact)
    return _mask_from_columns(w, pattern, cols)


def _mask_from_columns(w: torch.Tensor, pattern: Pattern, cols: torch.Tensor) -> torch.Tensor:
    rows, k = w.shape
    v, m = pattern.v, pattern.m
    a = _grouped(w, pattern)  # B, V, G, M
    b, _, g, _ = a.shape
    picked = a.gather(-1, cols.unsqueeze(1).expand(b, v, g, 4))  # B, V, G, 4
    keep2 = picked.topk(2, dim=-1).indices  # positions within the 4
    chosen = cols.unsqueeze(1).expand(b, v, g, 4).gather(-1, keep2)  # column offsets within the group
    mask = torch.zeros(b, v, g, m, dtype=torch.bool, device=w.device)
    mask.scatter_(-1, chosen, True)
    return mask.reshape(b * v, g * m)[:rows, :k]


def compress_vnm(w: torch.Tensor, pattern: str | Pattern, *, prune: bool = False,
                 exact: bool | None = None) -> VNMWeight:
    """Compress a V:N:M-sparse weight (or magnitude-prune it first with ``prune=True``)."""
    pattern = Pattern.parse(pattern)
    _check(w, pattern)
    check_finite(w)
    if prune:
        w = w * mask_vnm(w, pattern, exact)
    else:
        bad = validate_vnm(w, pattern)
        if bad:
            raise SparsityError(f"weight is not {pattern}: {bad}; prune it first (cutlass_nm.prune(w, "
                                f"'{pattern}')) or pass prune=True")
    rows, k = w.shape
    v, m = pattern.v, pattern.m
    g, b = -(-k // m), -(-rows // v)
    nz = torch.zeros(b * v, g * m, dtype=torch.bool, device=w.device)
    nz[:rows, :k] = w != 0
    block_nz = nz.reshape(b, v, g, m).any(1)  # B, G, M
    # 4 columns per block-group: the used ones first, padded with unused ones, ascending
    order = (block_nz.float() * 2 - torch.arange(m, device=w.device) / m).argsort(-1, descending=True)
    cols = order[..., :4].sort(-1).values
    wp = torch.zeros(b * v, g * m, dtype=w.dtype, device=w.device)
    wp[:rows, :k] = w
    grouped = wp.reshape(b, v, g, m)
    picked = grouped.gather(-1, cols.unsqueeze(1).expand(b, v, g, 4))  # B, V, G, 4
    pos = (picked != 0).float() * 2 - torch.arange(4, device=w.device) / 4
    keep = pos.topk(2, dim=-1).indices.sort(-1).values  # B, V, G, 2 within the 4
    values = picked.gather(-1, keep).reshape(b * v, g * 2)[:rows]
    meta = (keep[..., 0] | (keep[..., 1] << 2)).to(torch.uint8).reshape(b * v, g)[:rows]
    return VNMWeight(values.contiguous(), cols.to(torch.uint8).contiguous(), meta.contiguous(), (rows, k), pattern)


def validate_vnm(w: torch.Tensor, pattern: str | Pattern) -> str | None:
    """None if ``w`` satisfies the pattern, else a description of the first violation."""
    pattern = Pattern.parse(pattern)
    _check(w, pattern)
    rows, k = w.shape
    v, m = pattern.v, pattern.m
    g, b = -(-k // m), -(-rows // v)
    nz = torch.zeros(b * v, g * m, dtype=torch.bool, device=w.device)
    nz[:rows, :k] = w != 0
    grouped = nz.reshape(b, v, g, m)
    cols_used = grouped.any(1).sum(-1)  # B, G
    if (cols_used > 4).any():
        bi, gi = (int(t) for t in torch.nonzero(cols_used > 4)[0])
        return f"rows {bi * v}..{bi * v + v - 1} use {int(cols_used[bi, gi])} > 4 columns of group {gi}"
    per_row = grouped.sum(-1)  # B, V, G
    if (per_row > 2).any():
        bi, vi, gi = (int(t) for t in torch.nonzero(per_row > 2)[0])
        return f"row {bi * v + vi} keeps {int(per_row[bi, vi, gi])} > 2 weights in group {gi}"
    return None


def kept_fraction(w: torch.Tensor, mask: torch.Tensor) -> float:
    """Σ|w| kept by ``mask`` over Σ|w|."""
    a = w.abs().float()
    return float((a * mask).sum() / a.sum())


def unstructured_kept_fraction(w: torch.Tensor, density: float) -> float:
    """Kept magnitude of unstructured magnitude pruning at the same density (the upper bound)."""
    a = w.abs().float().flatten()
    keep = max(1, round(density * a.numel()))
    return float(a.topk(keep).values.sum() / a.sum())


def decode_vnm_layout(w: VNMWeight) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The decode path's sparse-tensor-core layout (nm_decode mode 3; V % 32 == 0, so a 32-row block lies in one
    V-block). Groups are padded to a multiple of 8 (G_p: zero values, valid metadata) and rows to a multiple of 32.

    values: fp16/bf16 ``[ceil(rows / 32)][G_p / 8 * 576]``: per 32-row block and step of 8 groups, the
    mma.sp.m16n8k32 A fragments of its two 16-row tiles (``[tile][lane][8]``: lane 4 g + c holds the 2 kept values
    of row g, group c; row g + 8, group c; row g, group c + 4; row g + 8, group c + 4), then 32 metadata words
    (int32 in 64 halves; lane 4 g + 2 tile + hi: the nibbles of groups 8 s + 4 hi + i, i < 4, of the tile's row g at
    bits 4 i and of its row g + 8 at bits 16 + 4 i; the layout the hardware reads, found by a probe on the H100).
    indices: uint8 ``[ceil(rows / V)][4 G_p]``: each group's 4 gathered columns (offsets within the group).
    Returns (values, indices, stride = 2 G_p: the kept values per padded row)."""
    if w.pattern.v % 32:
        raise ShapeError(f"the sparse-tensor-core decode layout needs V % 32 == 0, got {w.pattern}")
    rows, groups = w.shape[0], w.groups
    gp = -(-groups // 8) * 8
    blocks = -(-rows // 32)
    values = torch.empty(blocks, gp // 8 * 576, dtype=w.dtype, device=w.device)
    for b0 in range(0, blocks, CHUNK_BLOCKS):  # a few MB of temporaries at a time, not 20x the layout's size
        b1 = min(blocks, b0 + CHUNK_BLOCKS)
        values[b0:b1] = _fragments(w.values[32 * b0: 32 * b1], w.meta[32 * b0: 32 * b1], b1 - b0, gp)
    cols = torch.zeros(w.columns.shape[0], gp, 4, dtype=torch.uint8, device=w.device)
    cols[:, :groups] = w.columns
    return values, cols.reshape(-1, 4 * gp).contiguous(), 2 * gp


def _fragments(values: torch.Tensor, meta: torch.Tensor, blocks: int, gp: int) -> torch.Tensor:
    """``decode_vnm_layout``'s values for ``blocks`` 32-row blocks whose rows are ``values`` / ``meta`` (fewer rows
    in the last block: zero values, padding metadata), groups padded to ``gp``: ``blocks x (gp / 8 * 576)``."""
    rows, groups = meta.shape
    rp, steps = 32 * blocks, gp // 8
    vals = torch.zeros(rp, gp, 2, dtype=values.dtype, device=values.device)
    vals[:rows, :groups] = values.reshape(rows, groups, 2)
    nibbles = torch.full((rp, gp), PAD_NIBBLE, dtype=torch.int64, device=values.device)
    nibbles[:rows, :groups] = meta.long()
    # rows = 32 b + 16 tile + 8 half + g; groups = 8 s + 4 hi + c
    frag = vals.reshape(blocks, 2, 2, 8, steps, 2, 4, 2).permute(0, 4, 1, 3, 6, 5, 2, 7)  # b s tile g c hi half pair
    # word of lane 4 g + 2 tile + hi: groups 4 hi .. 4 hi + 3 of row g (bits 0-15), then of row g + 8 (bits 16-31)
    shift = 4 * torch.arange(8, device=values.device).reshape(2, 4)  # half, c
    nib = nibbles.reshape(blocks, 2, 2, 8, steps, 2, 4) << shift.view(1, 1, 2, 1, 1, 1, 4)  # b tile half g s hi c
    words = nib.sum((2, 6)).permute(0, 3, 2, 1, 4)  # b s g tile hi
    words = torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)
    packed = torch.cat((frag.reshape(blocks, steps, 512), words.reshape(blocks, steps, 32).view(values.dtype)), dim=-1)
    return packed.reshape(blocks, steps * 576)

"""General N:M weights for the CUDA-core families: keep N of every M consecutive weights along k, with
the kept positions shared by a vector of ``vector`` consecutive output rows.

Why share indices across rows: a CUDA-core kernel gives each warp a block of output rows and walks
k; when every row of the block keeps the same positions, the warp reads one x element per kept
position (a shared-memory broadcast, no bank conflicts) and the index is uniform across the warp
(no divergence). NM-SpMM's measurements put the sweet spot at a warp's worth of rows, hence the
default ``vector = 32``; ``vector = 1`` is plain element-wise N:M (what the decode path can also take).

Canonical form: ``values`` rows x G·N (G = ceil(k / M), k zero-padded to G·M); ``indices``
ceil(rows / vector) x G·N uint8, ascending offsets within each group.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InputError, SparsityError
from ..patterns import Pattern
from .weight import CompressedWeight, check_finite, check_not_empty

VECTORS = (1, 8, 16, 32, 64, 128)


@dataclass(eq=False)
class NMWeight(CompressedWeight):
    values: torch.Tensor
    indices: torch.Tensor
    shape: tuple[int, int]
    pattern: Pattern
    vector: int

    def to_dense(self) -> torch.Tensor:
        rows, k = self.shape
        n, m = self.pattern.n, self.pattern.m
        g = self.indices.shape[1] // n
        idx = self.indices.long().repeat_interleave(self.vector, dim=0)[:rows].reshape(rows, g, n)
        values = self.kept_values()
        out = torch.zeros(rows, g, m, dtype=values.dtype, device=values.device)
        out.scatter_(-1, idx, values.reshape(rows, g, n))
        return out.reshape(rows, g * m)[:, :k]


def _check(w: torch.Tensor, pattern: Pattern, vector: int) -> None:
    if pattern.is_vnm:
        raise InputError(f"{pattern} is V:N:M; use formats.vnm")
    if vector not in VECTORS:
        raise InputError(f"vector must be one of {VECTORS}, got {vector}")
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_floating_point():
        raise InputError("an N:M weight is a 2-D floating-point tensor (out_features x in_features)")
    check_not_empty(w)


def _padded(w: torch.Tensor, pattern: Pattern, vector: int) -> torch.Tensor:
    rows, k = w.shape
    g, b = -(-k // pattern.m), -(-rows // vector)
    out = torch.zeros(b * vector, g * pattern.m, dtype=w.dtype, device=w.device)
    out[:rows, :k] = w
    return out.reshape(b, vector, g, pattern.m)


def mask_nm(w: torch.Tensor, pattern: str | Pattern, vector: int = 32) -> torch.Tensor:
    """Keep, in every group of M along k, the N positions of largest Σ|w| over each vector of rows."""
    pattern = Pattern.parse(pattern)
    _check(w, pattern, vector)
    check_finite(w)
    a = _padded(w.abs().float(), pattern, vector)  # B, V, G, M
    keep = a.sum(1).topk(pattern.n, dim=-1).indices  # B, G, N
    mask = torch.zeros(a.shape[0], a.shape[2], pattern.m, dtype=torch.bool, device=w.device)
    mask.scatter_(-1, keep, True)
    mask = mask.unsqueeze(1).expand_as(a).reshape(a.shape[0] * vector, -1)
    return mask[: w.shape[0], : w.shape[1]]


def validate_nm(w: torch.Tensor, pattern: str | Pattern, vector: int = 32) -> str | None:
    """None if every vector of rows uses at most N positions per group of M, else the first violation."""
    pattern = Pattern.parse(pattern)
    _check(w, pattern, vector)
    used = (_padded(w, pattern, vector) != 0).any(1).sum(-1)  # B, G
    if (used > pattern.n).any():
        b, g = (int(t) for t in torch.nonzero(used > pattern.n)[0])
        return (f"rows {b * vector}..{b * vector + vector - 1} use {int(used[b, g])} > {pattern.n} positions "
                f"of group {g} (columns {g * pattern.m}..{g * pattern.m + pattern.m - 1})")
    return None


def compress_nm(w: torch.Tensor, pattern: str | Pattern, vector: int = 32, *, prune: bool = False) -> NMWeight:
    """Compress an N:M weight (vector-shared positions), or magnitude-prune it first with ``prune=True``."""
    pattern = Pattern.parse(pattern)
    _check(w, pattern, vector)
    check_finite(w)
    if prune:
        w = w * mask_nm(w, pattern, vector)
    else:
        bad = validate_nm(w, pattern, vector)
        if bad:
            raise SparsityError(f"weight is not {pattern} (vector {vector}): {bad}; prune it first or pass "
                                "prune=True")
    rows, k = w.shape
    p = _padded(w, pattern, vector)  # B, V, G, M
    b, v, g, m = p.shape
    used = (p != 0).any(1).float() * 2 - torch.arange(m, device=w.device) / m  # used first, then low offsets
    idx = used.topk(pattern.n, dim=-1).indices.sort(-1).values  # B, G, N
    values = p.gather(-1, idx.unsqueeze(1).expand(b, v, g, pattern.n)).reshape(b * v, g * pattern.n)[:rows]
    return NMWeight(values.contiguous(), idx.reshape(b, g * pattern.n).to(torch.uint8).contiguous(), (rows, k),
                    pattern, vector)


def decode_layout(w: CompressedWeight, unit: int = 8) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Values and indices with each row padded (zeros) to a multiple of ``unit`` nonzeros, for 16-byte loads.

    Takes an N:M weight, or a V:N:M weight read as element-wise 2:M (its per-row column offsets)."""
    indices = w.indices if isinstance(w, NMWeight) else w.row_columns()
    nnz = w.values.shape[1]
    stride = -(-nnz // unit) * unit
    values = torch.zeros(w.values.shape[0], stride, dtype=w.dtype, device=w.device)
    values[:, :nnz] = w.values
    padded = torch.zeros(indices.shape[0], stride, dtype=torch.uint8, device=w.device)
    padded[:, :nnz] = indices
    return values, padded, stride


def _row_blocks(values: torch.Tensor) -> torch.Tensor:
    """``values`` with zero rows appended up to a multiple of 32."""
    rows = values.shape[0]
    padded = torch.zeros(-(-rows // 32) * 32, values.shape[1], dtype=values.dtype, device=values.device)
    padded[:rows] = values
    return padded


def decode_rows_layout(w: CompressedWeight) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``decode_layout`` with the values interleaved for one row per lane: [ceil(rows / 32)][stride / 8][32][8]
    (zeros past the last row), so a warp's chunk of 8 nonzeros for its 32 rows is one 512-byte load."""
    values, indices, stride = decode_layout(w)
    padded = _row_blocks(values)
    inter = padded.reshape(-1, 32, stride // 8, 8).transpose(1, 2).contiguous()
    return inter.reshape(padded.shape), indices, stride


def decode_mma_layout(w: CompressedWeight) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Values in mma.m16n8k16 A-fragment order for 32-row blocks and 16-position steps:
    [ceil(rows / 32)][stride / 16][tile 2][lane 32][8]. Lane l = 4 g + c holds, in order, rows (g, g + 8) x
    positions (2c, 2c + 1) for positions 0-7, then the same for positions 8-15 of its 16-row tile."""
    values, indices, stride = decode_layout(w, unit=16)
    padded = _row_blocks(values)
    # row = 32 b + 16 tile + 8 half + g; position = 16 s + 8 khalf + 2 c + pair
    v = padded.reshape(-1, 2, 2, 8, stride // 16, 2, 4, 2)  # b, tile, half, g, s, khalf, c, pair
    frag = v.permute(0, 4, 1, 3, 6, 5, 2, 7).contiguous()  # b, s, tile, g, c, khalf, half, pair
    return frag.reshape(padded.shape), indices, stride

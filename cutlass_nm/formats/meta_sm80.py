"""2:4 metadata in the layout CUTLASS's sm80 ``SparseGemm`` (mma.sp m16n8k32, 16-bit) reads.

Canonical nibbles are packed 4 to a uint16 (16 logical columns, first group in the low
bits), giving an E matrix of ``rows x k/16``. mma.sp wants E rows interleaved within
groups of 32 (row r -> 4·(r mod 8) + (r mod 32) div 8) and each 2x2 block of E
transposed, stored ``ColumnMajorInterleaved<2>``: offset = (c div 2)·2·rows_p + 2·r + c mod 2.
Rows and columns are padded so that any CTA tile reads inside the buffer.
"""

from __future__ import annotations

import torch

from .meta_sm90 import PAD_NIBBLE
from .sparse24 import Sparse24Weight

ROWS_ALIGN = 256  # largest CTA tile M of the sm80 family
COLS_ALIGN = 8  # tile K 128 / 16 columns per uint16
PAD_U16 = PAD_NIBBLE * 0x1111


def padded_shape(rows: int, k: int) -> tuple[int, int]:
    cols = -(-k // 16)
    return -(-rows // ROWS_ALIGN) * ROWS_ALIGN, -(-cols // COLS_ALIGN) * COLS_ALIGN


def element_offsets(rows_p: int, cols_p: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """uint16 offset of every logical E element (row, column) in the reordered buffer."""
    r = torch.arange(rows_p, device=device, dtype=torch.int64)[:, None]
    c = torch.arange(cols_p, device=device, dtype=torch.int64)[None, :]
    dr = (r // 32) * 32 + (r % 8) * 4 + (r % 32) // 8
    dc = c.expand(rows_p, cols_p)
    dr = dr.expand(rows_p, cols_p)
    swap_up = (dr % 2 == 0) & (dc % 2 == 1)
    swap_down = (dr % 2 == 1) & (dc % 2 == 0)
    dr = dr + swap_up.long() - swap_down.long()
    dc = dc - swap_up.long() + swap_down.long()
    return (dc // 2) * (2 * rows_p) + dr * 2 + dc % 2


def _quads(meta: torch.Tensor) -> torch.Tensor:
    rows, groups = meta.shape
    pad = (-groups) % 4
    if pad:
        meta = torch.cat((meta, torch.full((rows, pad), 0x4, dtype=torch.uint8, device=meta.device)), 1)
    m = meta.reshape(rows, -1, 4).to(torch.int32)
    return m[..., 0] | (m[..., 1] << 4) | (m[..., 2] << 8) | (m[..., 3] << 12)


def to_sm80(w: Sparse24Weight) -> torch.Tensor:
    """Flat int16 metadata buffer (bit pattern of uint16) for the sm80 family."""
    return from_groups(w.groups(), w.shape[1])


def from_groups(groups: torch.Tensor, k: int) -> torch.Tensor:
    """:func:`to_sm80` of per-group nibbles (``rows x k/4``, one a byte)."""
    rows = groups.shape[0]
    rows_p, cols_p = padded_shape(rows, k)
    out = torch.full((rows_p * cols_p,), PAD_U16, dtype=torch.int32, device=groups.device)
    q = _quads(groups)
    off = element_offsets(rows_p, cols_p, groups.device)[:rows, : q.shape[1]]
    out[off.reshape(-1)] = q.reshape(-1)
    return out.to(torch.int16)  # wraps to the same 16-bit pattern


def from_sm80(e: torch.Tensor, rows: int, k: int) -> torch.Tensor:
    """Inverse of :func:`to_sm80`: the canonical ``rows x k/4`` nibbles."""
    rows_p, cols_p = padded_shape(rows, k)
    off = element_offsets(rows_p, cols_p, e.device)[:rows, : -(-k // 16)]
    q = e.to(torch.int32)[off] & 0xFFFF
    nib = torch.stack([(q >> s) & 0xF for s in (0, 4, 8, 12)], dim=-1).reshape(rows, -1)
    return nib[:, : k // 4].to(torch.uint8).contiguous()

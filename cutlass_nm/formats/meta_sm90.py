"""2:4 metadata in the layout CUTLASS's sm90 sparse GEMM (wgmma.sp) reads.

The layout is ``Sm90GemmSparseConfig::fill_layoutE`` for K-major A: an atom of 64 rows x
``atom_k`` logical columns, atoms tiled along M first, then K. CUTLASS makes ``atom_k = min(tile_k, 128)``;
sptc24_sm90's kernels read the 64-column atom at every tile K, so a weight needs one copy (each launcher
reports its atom: ``cnm_meta_atom_k``).
Inside a 16-bit A's atom, logical coordinates decompose as
m = m0 + 8·m1 + 16·m2 (8, 2, 4) and k = k0 + 16·k1 + 32·k2 (16, 2, atom_k/32),
with compact strides ordered k0 < m1 < k2 < m0 < k1 < m2; an 8-bit A's (FP8) atom is row-major.
One metadata byte covers 8 logical columns (two groups of 4: low nibble first).
tests/test_meta_layouts.py checks both against CuTe itself, compiled by nvcc.
"""

from __future__ import annotations

import torch

from .sparse24 import PAD_NIBBLE, Sparse24Weight

ROWS_ALIGN = 64
CHUNK_ROWS = 1024  # rows converted at once (a multiple of ROWS_ALIGN): the index temporaries stay a few MB
PAD_BYTE = PAD_NIBBLE * 0x11  # two padding nibbles


def padded_shape(rows: int, k: int, atom_k: int) -> tuple[int, int]:
    return -(-rows // ROWS_ALIGN) * ROWS_ALIGN, -(-k // atom_k) * atom_k


def byte_offsets(rows_a: int, k_a: int, atom_k: int, device: torch.device | str = "cpu", bits: int = 16,
                 rows: tuple[int, int] | None = None) -> torch.Tensor:
    """Byte offset of every (row, 8-column block) of a ``rows_a x k_a`` padded problem, for ``bits``-bit A; only
    the rows of ``rows = (start, stop)`` when given."""
    start, stop = rows or (0, rows_a)
    m = torch.arange(start, stop, device=device, dtype=torch.int64)[:, None]
    k = torch.arange(0, k_a, 8, device=device, dtype=torch.int64)[None, :]
    mb, kk, kb = m // 64, k % atom_k, k // atom_k
    if bits == 8:
        inside = kk + atom_k * (m % 64)
    else:
        nk = atom_k // 32
        m0, m1, m2 = m % 8, (m // 8) % 2, (m // 16) % 4
        k0, k1, k2 = kk % 16, (kk // 16) % 2, kk // 32
        inside = k0 + 16 * m1 + 32 * k2 + 32 * nk * m0 + 256 * nk * k1 + 512 * nk * m2
    return (inside + mb * (64 * atom_k) + kb * (rows_a * atom_k)) // 8


def _pairs(meta: torch.Tensor) -> torch.Tensor:
    """Canonical per-group nibbles (rows x k/4) -> one byte per 8 columns (rows x k/8)."""
    rows, groups = meta.shape
    if groups % 2:
        meta = torch.cat((meta, torch.full((rows, 1), PAD_NIBBLE, dtype=torch.uint8, device=meta.device)), 1)
    m = meta.reshape(rows, -1, 2).to(torch.int32)
    return (m[..., 0] | (m[..., 1] << 4)).to(torch.uint8)


def to_sm90(w: Sparse24Weight, atom_k: int, bits: int = 16) -> torch.Tensor:
    """Flat uint8 metadata buffer for the sm90 kernels whose tile K gives ``atom_k`` (``bits``: A's element width,
    8 for FP8), filled ``CHUNK_ROWS`` rows at a time."""
    rows, k = w.shape
    rows_a, k_a = padded_shape(rows, k, atom_k)
    out = torch.full((rows_a * k_a // 8,), PAD_BYTE, dtype=torch.uint8, device=w.device)
    for start in range(0, rows, CHUNK_ROWS):
        stop = min(rows, start + CHUNK_ROWS)
        b = _pairs(w.meta[start:stop])
        off = byte_offsets(rows_a, k_a, atom_k, w.device, bits, rows=(start, stop))[:, : b.shape[1]]
        out[off.reshape(-1)] = b.reshape(-1)
    return out


def from_sm90(e: torch.Tensor, rows: int, k: int, atom_k: int, bits: int = 16) -> torch.Tensor:
    """Inverse of :func:`to_sm90`: the canonical ``rows x k/4`` nibbles."""
    rows_a, k_a = padded_shape(rows, k, atom_k)
    off = byte_offsets(rows_a, k_a, atom_k, e.device, bits)[:rows, : -(-k // 8)]
    b = e[off].to(torch.int32)
    nib = torch.stack((b & 0xF, b >> 4), dim=-1).reshape(rows, -1)
    return nib[:, : k // 4].to(torch.uint8).contiguous()

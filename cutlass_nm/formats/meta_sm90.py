"""2:4 metadata in the layout CUTLASS's sm90 sparse GEMM (wgmma.sp) reads, which is also the canonical 2:4 form.

The layout is ``Sm90GemmSparseConfig::fill_layoutE`` for K-major A: an atom of 64 rows x
``atom_k`` logical columns, atoms tiled along M first, then K. CUTLASS makes ``atom_k = min(tile_k, 128)``;
sptc24_sm90's kernels read the 64-column atom at every tile K, and decode24 reads it too, so a 16-bit weight's
canonical ``meta`` (:func:`pack`, ``ATOM_K``) is the one copy both run on. ``meta`` is 2-D,
``ceil(k / 64) x 8 * rows_a`` (rows_a: rows rounded up to 64): row s is the 64-column slab s, 8 bytes a weight row,
so rows [64 a, 64 b) of a weight are the column slice [:, 512 a : 512 b] (a stacked layer's rows are a view).
Inside a 16-bit A's atom, logical coordinates decompose as
m = m0 + 8·m1 + 16·m2 (8, 2, 4) and k = k0 + 16·k1 + 32·k2 (16, 2, atom_k/32),
with compact strides ordered k0 < m1 < k2 < m0 < k1 < m2; an 8-bit A's (FP8) atom is row-major.
One metadata byte covers 8 logical columns (two groups of 4: low nibble first).
tests/test_meta_layouts.py checks both against CuTe itself, compiled by nvcc.
"""

from __future__ import annotations

import torch

from .weight import kernel_alias

ROWS_ALIGN = 64
ATOM_K = 64  # the canonical layout's atom: 64 logical columns
CHUNK_ROWS = 1024  # rows converted at once (a multiple of ROWS_ALIGN): the index temporaries stay a few MB
PAD_NIBBLE = 0b0100  # metadata of an all-zero padding group: positions (0, 1), a valid ordered pair
PAD_BYTE = PAD_NIBBLE * 0x11  # two padding nibbles


def padded_shape(rows: int, k: int, atom_k: int) -> tuple[int, int]:
    return -(-rows // ROWS_ALIGN) * ROWS_ALIGN, -(-k // atom_k) * atom_k


def packed_shape(rows: int, k: int) -> tuple[int, int]:
    """The canonical 2:4 metadata's shape for a ``rows x k`` weight: (64-column slabs, 8 bytes x padded rows)."""
    rows_a, k_a = padded_shape(rows, k, ATOM_K)
    return k_a // ATOM_K, rows_a * ATOM_K // 8


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


def _pairs(groups: torch.Tensor) -> torch.Tensor:
    """Per-group nibbles (rows x k/4, one a byte) -> one byte per 8 columns (rows x k/8)."""
    rows, count = groups.shape
    if count % 2:
        groups = torch.cat((groups, torch.full((rows, 1), PAD_NIBBLE, dtype=torch.uint8, device=groups.device)), 1)
    m = groups.reshape(rows, -1, 2)
    return m[..., 0] | (m[..., 1] << 4)


def from_groups(groups: torch.Tensor, k: int, atom_k: int = ATOM_K, bits: int = 16) -> torch.Tensor:
    """Flat uint8 metadata buffer for the sm90 kernels whose tile K gives ``atom_k`` (``bits``: A's element width,
    8 for FP8) from per-group nibbles (``rows x k/4``, one a byte), filled ``CHUNK_ROWS`` rows at a time."""
    rows = groups.shape[0]
    rows_a, k_a = padded_shape(rows, k, atom_k)
    out = torch.full((rows_a * k_a // 8,), PAD_BYTE, dtype=torch.uint8, device=groups.device)
    for start in range(0, rows, CHUNK_ROWS):
        stop = min(rows, start + CHUNK_ROWS)
        b = _pairs(groups[start:stop])
        off = byte_offsets(rows_a, k_a, atom_k, groups.device, bits, rows=(start, stop))[:, : b.shape[1]]
        out[off.reshape(-1)] = b.reshape(-1)
    return out


def pack(groups: torch.Tensor, k: int) -> torch.Tensor:
    """The canonical 2:4 metadata (:func:`packed_shape`) of per-group nibbles ``rows x k/4``."""
    return from_groups(groups, k).view(packed_shape(groups.shape[0], k))


def unpack(meta: torch.Tensor, rows: int, k: int) -> torch.Tensor:
    """Inverse of :func:`pack`: the per-group nibbles ``rows x k/4`` (one a byte) of canonical metadata, which may
    be a column slice of a larger weight's (any stride between slabs)."""
    rows_a, k_a = padded_shape(rows, k, ATOM_K)
    pitch = rows_a * ATOM_K // 8
    out = torch.empty(rows, k // 4, dtype=torch.uint8, device=meta.device)
    for start in range(0, rows, CHUNK_ROWS):
        stop = min(rows, start + CHUNK_ROWS)
        off = byte_offsets(rows_a, k_a, ATOM_K, meta.device, rows=(start, stop))[:, : -(-k // 8)]
        out[start:stop] = _nibbles(meta[off // pitch, off % pitch], k)
    return out


def to_sm90(w, atom_k: int, bits: int = 16) -> torch.Tensor:
    """The metadata a sm90 kernel of ``atom_k`` and ``bits``-bit A reads for the 2:4 weight ``w``: for the 16-bit
    64-column atom its own canonical ``meta`` (an alias of its storage, no copy, where its slabs are rows 16-byte
    aligned as TMA reads them; else a contiguous copy), otherwise a flat buffer built from its groups."""
    if (atom_k, bits) == (ATOM_K, 16):
        return kernel_alias(w.meta, 16, w.meta.stride(1) == 1)
    return from_groups(w.groups(), w.shape[1], atom_k, bits)


def from_sm90(e: torch.Tensor, rows: int, k: int, atom_k: int, bits: int = 16) -> torch.Tensor:
    """Inverse of :func:`from_groups`: the per-group nibbles ``rows x k/4`` of a flat buffer."""
    rows_a, k_a = padded_shape(rows, k, atom_k)
    off = byte_offsets(rows_a, k_a, atom_k, e.device, bits)[:rows, : -(-k // 8)]
    return _nibbles(e.reshape(-1)[off], k).contiguous()


def _nibbles(pairs: torch.Tensor, k: int) -> torch.Tensor:
    """Bytes of two groups each (rows x k/8, low nibble first) -> per-group nibbles, rows x k/4 (one a byte)."""
    return torch.stack((pairs & 0xF, pairs >> 4), dim=-1).reshape(pairs.shape[0], -1)[:, : k // 4]

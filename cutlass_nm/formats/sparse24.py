"""2:4 weights: magnitude pruning, the canonical compressed form, validation, decompression.

The weight W is ``rows x k`` (out_features x in_features), the sparse A operand of D = W·Xᵀ.
Canonical compressed form (one format on every GPU):

* ``values``: ``rows x k/2``, the two kept values of every group of 4, in ascending position;
* ``meta``: uint8, a nibble per group: bits 0-1 = first kept position, bits 2-3 = second kept position
  (always first < second, as ``mma.sp::ordered_metadata`` needs), two groups a byte, in the order Hopper's
  sparse tensor cores read them (``meta_sm90``: ``ceil(k/64) x 8·rows_a``, rows_a = rows rounded up to 64), so
  that the sm90 GEMMs and the 2:4 decode read the weight's one copy. ``groups()`` gives the nibbles as a
  ``rows x k/4`` tensor (one a byte); ``Sparse24Weight.from_groups`` builds a weight from them.

Other kernels' metadata layouts (sm80, FP8) are derived from ``groups()`` once per weight and cached on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import InputError, ShapeError, SparsityError
from ..patterns import Pattern
from . import meta_sm90
from .weight import CompressedWeight, Layouts, check_finite, check_not_empty

GROUP = 4
KEEP = 2
PATTERN_24 = Pattern.parse("2:4")
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _check_weight(w: torch.Tensor) -> None:
    if not isinstance(w, torch.Tensor):
        raise InputError(f"expected a torch.Tensor weight, got {type(w).__name__}")
    if w.dim() != 2:
        raise InputError(f"a weight is 2-D (out_features x in_features), got shape {tuple(w.shape)}")
    if w.dtype not in _FLOAT_DTYPES:
        raise InputError(f"weight dtype must be one of {_FLOAT_DTYPES}, got {w.dtype}")
    check_not_empty(w)
    if w.shape[1] % GROUP:
        raise InputError(f"2:4 needs in_features % 4 == 0, got in_features = {w.shape[1]}")


def _groups(w: torch.Tensor) -> torch.Tensor:
    return w.reshape(w.shape[0], w.shape[1] // GROUP, GROUP)


def _kept_positions(w: torch.Tensor) -> torch.Tensor:
    """Positions (ascending) of the 2 largest magnitudes in every group: rows x k/4 x 2, int64."""
    pos = _groups(w).abs().float().topk(KEEP, dim=-1, sorted=False).indices
    return pos.sort(dim=-1).values


def mask_24(w: torch.Tensor) -> torch.Tensor:
    """Boolean mask keeping the 2 largest magnitudes of every 4 consecutive weights along k."""
    _check_weight(w)
    check_finite(w)
    pos = _kept_positions(w)
    mask = torch.zeros(_groups(w).shape, dtype=torch.bool, device=w.device)
    mask.scatter_(-1, pos, True)
    return mask.reshape(w.shape)


def prune_24(w: torch.Tensor) -> torch.Tensor:
    """Return a copy of ``w`` with all but the 2 largest magnitudes of every 4 set to zero."""
    return w * mask_24(w)


def validate_24(w: torch.Tensor) -> torch.Tensor:
    """Return the (row, group) indices of groups with more than 2 nonzeros; empty means valid."""
    _check_weight(w)
    nnz = (_groups(w) != 0).sum(-1)
    return torch.nonzero(nnz > KEEP)


@dataclass(eq=False)
class Sparse24Weight(CompressedWeight):
    """A 2:4-compressed weight of logical shape ``rows x k``; kernel layouts are cached lazily."""

    values: torch.Tensor
    meta: torch.Tensor
    shape: tuple[int, int]
    _layouts: dict = field(default_factory=Layouts, repr=False)

    def __post_init__(self) -> None:
        expected = meta_sm90.packed_shape(*self.shape)
        if self.meta.dtype != torch.uint8 or tuple(self.meta.shape) != expected:
            raise ShapeError(f"a {self.shape[0]}x{self.shape[1]} 2:4 weight's meta is uint8 of shape {expected} "
                             f"(formats/sparse24.py), got {self.meta.dtype} {tuple(self.meta.shape)}; per-group "
                             "nibbles (rows x k/4) become a weight through Sparse24Weight.from_groups")

    @classmethod
    def from_groups(cls, values: torch.Tensor, groups: torch.Tensor, shape: tuple[int, int]) -> Sparse24Weight:
        """A weight from its values and per-group nibbles (``rows x k/4`` uint8, one a byte)."""
        return cls(values, meta_sm90.pack(groups, shape[1]), shape)

    @property
    def pattern(self) -> Pattern:
        """Always 2:4 (the other weight types carry theirs as a field)."""
        return PATTERN_24

    def groups(self) -> torch.Tensor:
        """The per-group nibbles, ``rows x k/4`` uint8 (one a byte; a fresh tensor)."""
        return meta_sm90.unpack(self.meta, *self.shape)

    def positions(self) -> torch.Tensor:
        """Kept positions per group, rows x k/4 x 2 (int64)."""
        m = self.groups().to(torch.int64)
        return torch.stack((m & 3, (m >> 2) & 3), dim=-1)

    def to_dense(self) -> torch.Tensor:
        """Decompress back to the ``rows x k`` dense (pruned) weight."""
        rows, k = self.shape
        pairs = self.kept_values().reshape(rows, k // GROUP, KEEP)
        out = torch.zeros(rows, k // GROUP, GROUP, dtype=pairs.dtype, device=self.device)
        groups = self.groups()
        for slot in range(KEEP):  # byte-sized position temporaries, no int64 index the size of the weight
            at = (groups >> (2 * slot)) & 3
            for p in range(GROUP):
                out[..., p] = torch.where(at == p, pairs[..., slot], out[..., p])
        return out.reshape(rows, k)

    def to(self, device: torch.device | str) -> Sparse24Weight:
        """Copy to another device (cached kernel layouts are rebuilt there on first use)."""
        return Sparse24Weight(self.values.to(device), self.meta.to(device), self.shape)


def compress_24(w: torch.Tensor, *, prune: bool = False) -> Sparse24Weight:
    """Compress a 2:4-sparse weight (or, with ``prune=True``, any weight after magnitude pruning).

    Raises SparsityError, naming the first offending group, if ``w`` is not 2:4 and ``prune`` is False.
    """
    _check_weight(w)
    check_finite(w)
    if prune:
        w = prune_24(w)
    else:
        bad = validate_24(w)
        if len(bad):
            r, g = (int(v) for v in bad[0])
            raise SparsityError(
                f"weight is not 2:4-sparse: {len(bad)} group(s) of 4 keep more than 2 nonzeros, the first at "
                f"row {r}, columns {g * GROUP}..{g * GROUP + 3}; prune it first (cutlass_nm.prune(w, '2:4')) "
                "or pass prune=True"
            )
    w = w.contiguous()
    pos = _kept_positions(w)
    values = _groups(w).gather(-1, pos).reshape(w.shape[0], w.shape[1] // 2).contiguous()
    groups = (pos[..., 0] | (pos[..., 1] << 2)).to(torch.uint8)
    return Sparse24Weight.from_groups(values, groups, (int(w.shape[0]), int(w.shape[1])))

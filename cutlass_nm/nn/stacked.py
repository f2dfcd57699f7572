"""``StackedSparseLinear``: sparse layers of one input stacked by rows, one kernel for all of them at decode sizes;
``StackedPart`` keeps each layer callable under its own name (an attention's q/k/v)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..dispatch import matmul
from ..errors import InputError, PatternError
from ..formats import meta_sm90
from ..formats.weight import refresh_layouts
from ..ops import fp8_view, nm_view, vnm_view, weight_view
from ..patterns import Pattern
from .linear import SparseLinear, cached_view, direct_call

QKV_NAMES = ("q_proj", "k_proj", "v_proj")  # an attention's projections of one input (LLaMA, Mistral, Qwen2)
STACKED_QKV = "qkv_proj"  # the StackedSparseLinear they become
FUSED_ROWS = 16  # a StackedSparseLinear's layers run as one kernel up to this many rows of x, above it one GEMM each


class StackedSparseLinear(SparseLinear):
    """Sparse layers of one input and one pattern stacked by rows (and their biases, all or none), ``sizes`` their
    out_features in order. Every pattern runs along in_features, so the stack is each layer's own pattern; V:N:M
    and general N:M share positions by blocks of rows (V, ``vector``), so every layer but the last fills whole
    blocks. ``forward`` is the stacked layer. ``split(x)`` gives each layer's output: one kernel up to
    ``FUSED_ROWS`` rows of x (and under ``torch.compile``); above that, on the GPU, one GEMM a layer on row views
    of the stack (``parts()``: contiguous outputs, no strided halves for what follows). ``part(x, i)`` is
    ``split(x)[i]``, one split shared by the parts taken of one x (``StackedPart``'s forward)."""

    def __init__(self, in_features: int, sizes: Sequence[int], bias: bool = False,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None, *,
                 pattern: str | Pattern = "2:4", vector: int = 32, fp8: bool = False) -> None:
        super().__init__(in_features, sum(sizes), bias, pattern, device, dtype, vector=vector, fp8=fp8)
        self.sizes = tuple(int(n) for n in sizes)
        block = self.row_block
        if any(n % block for n in self.sizes[:-1]):
            what = "holds its metadata" if self.pattern.is_24 else "shares positions"
            raise PatternError(f"a {self.pattern} stack {what} by blocks of {block} rows: every layer but the last "
                               f"needs out_features % {block} == 0, got {list(self.sizes)}")
        self._pending: list | None = None  # the last split: [x, x's version, outputs, parts not yet taken]

    @property
    def row_block(self) -> int:
        """The rows that share one block of positions: V (V:N:M), ``vector`` (general N:M), 64 (2:4: its packed
        metadata holds rows in blocks of 64)."""
        p = self.pattern
        return p.v if p.is_vnm else meta_sm90.ROWS_ALIGN if p.is_24 else self.vector

    @classmethod
    def stack(cls, layers: Sequence[SparseLinear]) -> StackedSparseLinear:
        """Stack SparseLinear layers of one in_features and one pattern (and ``vector``), biased or not and FP8 or
        not alike, as they are: their compressed rows (FP8 scales, biases), nothing pruned again. V:N:M and N:M:
        every layer but the last fills whole blocks of rows."""
        if not layers:
            raise PatternError("StackedSparseLinear.stack takes at least one layer")
        if not all(isinstance(lin, SparseLinear) for lin in layers):
            raise InputError("StackedSparseLinear.stack takes SparseLinear layers, got "
                             f"{[type(lin).__name__ for lin in layers]}")
        first = layers[0]
        biased = first.bias is not None
        if not all(isinstance(lin, SparseLinear) and (lin.bias is not None) == biased and
                   (lin.in_features, lin.pattern, lin.vector, lin.fp8) ==
                   (first.in_features, first.pattern, first.vector, first.fp8) for lin in layers):
            raise PatternError("StackedSparseLinear.stack takes SparseLinear layers of one in_features and one "
                               "pattern (and vector), biased or not and FP8 or not alike")
        stacked = cls(first.in_features, [lin.out_features for lin in layers], biased, first.values.device,
                      first.bias.dtype if biased else None if first.fp8 else first.values.dtype,
                      pattern=first.pattern, vector=first.vector or 32, fp8=first.fp8)
        with torch.no_grad():
            for name, t in (*stacked._buffers.items(), *stacked._parameters.items()):
                packed = name == "meta" and first.pattern.is_24  # 2:4 metadata: rows along its second dim
                t.copy_(torch.cat([getattr(lin, name) for lin in layers], dim=1 if packed else 0))
        return stacked

    def parts(self) -> tuple[Any, ...]:
        """Each stacked layer's rows as a compressed weight over this module's buffers (built once; kernel layouts of
        their own)."""
        return self._parts()[0]

    def _parts(self) -> tuple[tuple[Any, ...], tuple[torch.Tensor | None, ...]]:
        """(``parts()``, each layer's bias: views of the stacked bias, or None), kept while the tensors are these."""
        def build() -> tuple[tuple[Any, ...], tuple[torch.Tensor | None, ...]]:
            rows = [slice(a, b) for a, b in itertools.pairwise([0, *itertools.accumulate(self.sizes)])]
            return tuple(self._rows(r) for r in rows), tuple(None if self.bias is None else self.bias[r] for r in rows)

        tensors = (*self._buffers.values(), *self._parameters.values())
        return cached_view(self, tensors, build, slot="_cached_parts")

    def _rows(self, r: slice) -> Any:
        """The compressed weight of rows ``r`` (whole blocks of positions from the start) over this module's
        buffers."""
        p, k = self.pattern, self.in_features
        if p.is_24:
            meta = self.meta[:, 8 * r.start: 8 * meta_sm90.padded_shape(r.stop, k, meta_sm90.ATOM_K)[0]]
            if self.fp8:
                return fp8_view(self.values[r], meta, self.scale[r])
            return weight_view(self.values[r], meta)
        block = self.row_block
        blocks = slice(r.start // block, -(-r.stop // block))
        if p.is_vnm:
            return vnm_view(self.values[r], self.columns[blocks], self.meta[r], p.v, p.m, k)
        return nm_view(self.values[r], self.indices[blocks], p.n, p.m, k, self.vector)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        """SparseLinear's, then the parts' layouts are rebuilt in place too."""
        super()._load_from_state_dict(*args, **kwargs)
        self.refresh_parts()

    def refresh_parts(self) -> None:
        """Rebuild the parts' kernel layouts in place (the buffers changed in place)."""
        for w in self.parts():
            refresh_layouts(w)

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Each stacked layer's output for ``x``, in order (see the class: one kernel or one GEMM a layer)."""
        if x.numel() > FUSED_ROWS * x.shape[-1] and direct_call(x, self.bias):
            x = x if x.is_contiguous() else x.contiguous()
            return tuple(matmul(x, w, b) for w, b in zip(*self._parts(), strict=True))
        return torch.split_with_sizes(self(x), self.sizes, -1)  # the op itself: half Tensor.split's host time

    def part(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """``split(x)[index]``: the first part taken of ``x`` splits it, the others take their outputs from that
        split until each part was taken once (``x`` the same tensor, unchanged: its version counter, where it has
        one; inference-mode tensors and traced code have none)."""
        pending = self._pending
        version = None if torch.compiler.is_compiling() or x.is_inference() else x._version
        if pending is None or pending[0] is not x or pending[1] != version or not pending[3] >> index & 1:
            pending = [x, version, self.split(x), (1 << len(self.sizes)) - 1]  # the parts not taken: a bit each
        pending[3] &= ~(1 << index)
        self._pending = pending if pending[3] else None
        return pending[2][index]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, sizes={self.sizes}"


class StackedPart(nn.Module):
    """Layer ``index`` of a ``StackedSparseLinear`` where a model calls it by its own name (e.g. an attention's
    ``q_proj``): ``forward(x)`` is ``stack.part(x, index)``. It holds no weights: the stack is a child of the
    module it serves, and only referenced here."""

    def __init__(self, stack: StackedSparseLinear, index: int) -> None:
        super().__init__()
        self.__dict__["stack"] = stack  # not a child: its buffers belong to the parent's state_dict once
        self.index = index
        self.in_features, self.out_features = stack.in_features, stack.sizes[index]

    def weight_dense(self) -> torch.Tensor:
        """This layer's (pruned) dense weight, decompressed on demand."""
        start = sum(self.stack.sizes[:self.index])
        return self.stack.weight_dense()[start:start + self.out_features]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stack.part(x, self.index)

    def extra_repr(self) -> str:
        return f"index={self.index}, in_features={self.in_features}, out_features={self.out_features}"


def stack_sparse_linears(module: nn.Module, names: Sequence[str], stacked_name: str) -> StackedSparseLinear | None:
    """Replace, in place, ``module``'s children ``names`` (SparseLinear layers that ``StackedSparseLinear.stack``
    takes) by a ``StackedSparseLinear`` child ``stacked_name`` and a ``StackedPart`` under each name;
    returns the stack, or None where the children do not qualify (left as they are)."""
    layers = [getattr(module, n, None) for n in names]
    if not all(type(lin) is SparseLinear for lin in layers):
        return None
    try:
        stack = StackedSparseLinear.stack(layers)
    except PatternError:
        return None
    setattr(module, stacked_name, stack)
    for i, name in enumerate(names):
        setattr(module, name, StackedPart(stack, i))
    return stack

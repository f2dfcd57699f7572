"""Modules: ``SparseLinear`` (an ``nn.Linear`` with a 2:4-, V:N:M- or general N:M-compressed weight),
``SparseGatedMLP`` and ``Sparse24GatedMLP`` (SwiGLU MLPs whose gate and up run as one kernel: V:N:M and 2:4),
``sparsify`` and ``sparsify_gated_mlps``, and ``precompile_model``."""

from __future__ import annotations

import fnmatch
import functools
import itertools
import logging
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .decisions import LayerDecision, decide
from .dispatch import kernels_for, matmul, precompile_ids
from .errors import CutlassNMError, InputError, PatternError, ShapeError
from .families.sptc24_fp8_sm90.family import K_MULTIPLE as FP8_K_MULTIPLE
from .formats import compress_as
from .formats.fp8 import Sparse24FP8Weight, quantize
from .formats.glu import PAIR_V, fuse_glu, split_glu
from .formats.nm import VECTORS
from .formats.weight import refresh_layouts
from .gated_mlp import gated_mlp, gated_mlp_kernels
from .ops import (
    fp8_view,
    nm_linear,
    nm_view,
    sparse24_fp8_linear,
    sparse24_linear,
    vnm_gated_mlp,
    vnm_linear,
    vnm_view,
    weight_view,
)
from .patterns import Pattern
from .routing import check_runnable, unrunnable

log = logging.getLogger("cutlass_nm.nn")


def direct_call(x: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    """Whether a module's forward may launch the kernels itself rather than through its custom op (same result,
    a fraction of the host time): a plain CUDA tensor, outside ``torch.compile``, with no gradient to record."""
    if type(x) is not torch.Tensor or not x.is_cuda or torch.compiler.is_compiling():
        return False
    return not (torch.is_grad_enabled() and (x.requires_grad or (bias is not None and bias.requires_grad)))


def weight_tensors(w: Any) -> dict[str, torch.Tensor]:
    """The SparseLinear buffers that hold the compressed weight ``w``, by name: 2:4 values and meta; V:N:M values,
    columns and meta; N:M values and indices; an FP8 weight's values as their uint8 bytes (what the module stores)
    plus its scale."""
    p = w.pattern
    names = ("values", "meta") if p.is_24 else ("values", "columns", "meta") if p.is_vnm else ("values", "indices")
    out = {b: getattr(w, b) for b in names}
    if isinstance(w, Sparse24FP8Weight):
        out.update(values=w.values.view(torch.uint8), scale=w.scale)
    return out


def cached_view(module: nn.Module, buffers: tuple[torch.Tensor, ...], build: Callable[[], Any],
                slot: str = "_cached_view") -> Any:
    """``build()``, kept on ``module`` (in ``slot``) while ``buffers`` are the same tensor objects (``.to()``,
    ``.half()`` or a buffer reassignment rebuild it; the view holds the tensors, so their ids cannot be reused
    meanwhile)."""
    ids = tuple(map(id, buffers))
    cached = module.__dict__.get(slot)
    if cached is None or cached[0] != ids:
        cached = module.__dict__[slot] = (ids, build())
    return cached[1]


class SparseLinear(nn.Module):
    """``y = x Wᵀ + b`` with W stored compressed; no dense copy is kept, ``state_dict`` holds the compressed
    buffers. 2:4: ``values`` (out x in/2) and ``meta`` (out x in/4, uint8). V:N:M (``"128:2:8"``): ``values``
    (out x 2G), ``columns`` (ceil(out/V) x G x 4, uint8) and ``meta`` (out x G, uint8), G = ceil(in/M). General
    N:M (``"3:7"``): ``values`` (out x G·N) and ``indices`` (ceil(out/vector) x G·N, uint8: the kept positions,
    shared by ``vector`` consecutive rows; see formats/nm.py).

    Takes every pattern ``cutlass_nm.prune`` takes (PatternError, naming the rule, for the others). The module may
    be built in any float dtype and cast later (``.half()``); its forward takes x in the weight's dtype, under
    ``matmul``'s input rules on every device (2:4 and V:N:M: fp16/bf16; general N:M also fp32)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, pattern: str | Pattern = "2:4",
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None, *,
                 vector: int = 32, fp8: bool = False) -> None:
        super().__init__()
        self.pattern = Pattern.parse(pattern)
        check_runnable(self.pattern)
        if fp8 and (not self.pattern.is_24 or in_features % FP8_K_MULTIPLE):
            raise PatternError(f"FP8 SparseLinear is 2:4 with in_features % {FP8_K_MULTIPLE} == 0, got "
                               f"{self.pattern} and in_features = {in_features}")
        self.fp8 = fp8
        if self.pattern.is_24 and in_features % 4:
            raise PatternError(f"2:4 needs in_features % 4 == 0, got {in_features}")
        if in_features < 1 or out_features < 1:
            raise ShapeError(f"SparseLinear needs in_features and out_features >= 1, got {in_features} and "
                               f"{out_features}")
        if not self.pattern.is_24 and not self.pattern.is_vnm and vector not in VECTORS:
            raise InputError(f"vector must be one of {VECTORS}, got {vector}")
        self.in_features, self.out_features = in_features, out_features
        self.vector = vector if not (self.pattern.is_24 or self.pattern.is_vnm) else 0
        dtype = dtype or torch.get_default_dtype()
        p = self.pattern
        if p.is_24:
            groups, kept = in_features // 4, in_features // 2
        elif p.is_vnm:
            groups = -(-in_features // p.m)
            kept = 2 * groups
            blocks = -(-out_features // p.v)
            cols = torch.arange(4, device=device, dtype=torch.uint8).expand(blocks, groups, 4).contiguous()
            self.register_buffer("columns", cols)
        else:
            groups = -(-in_features // p.m)
            kept = p.n * groups
            blocks = -(-out_features // vector)
            idx = torch.arange(p.n, device=device, dtype=torch.uint8).repeat(groups).expand(blocks, kept)
            self.register_buffer("indices", idx.contiguous())
        # FP8: the e4m3 bytes as uint8 (module casts such as .half() leave them alone) and a float32 scale per row
        values_dtype = torch.uint8 if fp8 else dtype
        self.register_buffer("values", torch.zeros(out_features, kept, device=device, dtype=values_dtype))
        if fp8:
            self.register_buffer("scale", torch.ones(out_features, device=device, dtype=torch.float32))
        if p.is_24 or p.is_vnm:
            self.register_buffer("meta", torch.full((out_features, groups), 0x4, device=device, dtype=torch.uint8))
        self.bias = nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype)) if bias else None

    @classmethod
    def from_linear(cls, linear: nn.Linear, pattern: str | Pattern = "2:4", *, prune: bool = True,
                    vector: int = 32, fp8: bool = False) -> SparseLinear:
        """Compress ``linear``'s weight (magnitude-pruned to the pattern unless ``prune=False``; ``fp8``: its kept
        values in e4m3 with per-output-channel scales, 2:4 only, Hopper); refused as ``cutlass_nm.prune`` refuses
        (pattern, dtype, NaN/Inf, shape), naming the rule."""
        w = linear.weight.detach()
        mod = cls(linear.in_features, linear.out_features, linear.bias is not None, pattern, w.device, w.dtype,
                  vector=vector, fp8=fp8)
        check_runnable(mod.pattern, w.dtype)
        c = compress_as(w, mod.pattern, prune=prune, vector=vector)
        for name, t in weight_tensors(quantize(c) if fp8 else c).items():
            mod._buffers[name].copy_(t)
        if linear.bias is not None:
            mod.bias.data.copy_(linear.bias.detach())
        return mod

    def compressed(self):
        """The weight as a compressed-weight view over this module's buffers (shares their storage)."""
        p = self.pattern
        if self.fp8:
            return fp8_view(self.values, self.meta, self.scale)
        if p.is_24:
            return weight_view(self.values, self.meta)
        if p.is_vnm:
            return vnm_view(self.values, self.columns, self.meta, p.v, p.m, self.in_features)
        return nm_view(self.values, self.indices, p.n, p.m, self.in_features, self.vector)

    def _view(self):
        """``compressed()``, kept while this module's buffers are the same tensors (eager calls build it once)."""
        return cached_view(self, tuple(self._buffers.values()), self.compressed)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        """``nn.Module``'s, then the kernel layouts already built from the old weight are rebuilt in place."""
        super()._load_from_state_dict(*args, **kwargs)
        refresh_layouts(self._view())

    def weight_dense(self) -> torch.Tensor:
        """The (pruned) dense weight, decompressed on demand."""
        return self.compressed().to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self._parameters.get("bias")
        if direct_call(x, bias):
            return matmul(x if x.is_contiguous() else x.contiguous(), self._view(), bias)
        p = self.pattern
        if self.fp8:
            return sparse24_fp8_linear(x, self.values, self.meta, self.scale, self.bias)
        if p.is_24:
            return sparse24_linear(x, self.values, self.meta, self.bias)
        if p.is_vnm:
            return vnm_linear(x, self.values, self.columns, self.meta, p.v, p.m, self.in_features, self.bias)
        return nm_linear(x, self.values, self.indices, p.n, p.m, self.in_features, self.vector, self.bias)

    def extra_repr(self) -> str:
        vector = f", vector={self.vector}" if self.vector else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, " \
               f"pattern={self.pattern}{vector}{', fp8=True' if self.fp8 else ''}"


@dataclass
class SparsifySummary:
    """What ``sparsify`` did: the layers it replaced, those it left dense with the reason, and those
    ``include``/``exclude`` left out (qualified module names; ``""`` is a bare ``nn.Linear`` passed as the model)."""

    pattern: str
    replaced: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    excluded: list[str] = field(default_factory=list)
    decisions: list[LayerDecision] = field(default_factory=list)  # per runnable layer: sparse or kept dense, why

    @property
    def kept_dense(self) -> list[str]:
        """Layers that could run the pattern but stay dense: sparse was not faster by ``min_speedup``."""
        return [d.name for d in self.decisions if d.decision == "dense"]

    def table(self) -> str:
        """One line per decided layer: name, shape, decision, dense/sparse speedup per token count, how."""
        return "\n".join(d.row() for d in self.decisions)

    def skipped_text(self) -> str:
        """The skipped layers grouped by reason: ``reason: name, name; reason: name``."""
        by_reason: dict[str, list[str]] = {}
        for name, reason in self.skipped.items():
            by_reason.setdefault(reason, []).append(repr(name))
        return "; ".join(f"{', '.join(names)}: {reason}" for reason, names in by_reason.items())


def _skip_reason(linear: nn.Linear, pattern: Pattern, fp8: bool = False) -> str | None:
    """Why ``linear`` cannot become a ``pattern`` SparseLinear that runs (None: it can)."""
    if (why := unrunnable(pattern, linear.weight.dtype)) is not None:
        return why
    if fp8 and (linear.in_features % FP8_K_MULTIPLE or linear.out_features % 8):
        return f"FP8 2:4 needs in_features % {FP8_K_MULTIPLE} == 0 and out_features % 8 == 0"
    if not pattern.is_24 and not pattern.is_vnm:
        return None  # general N:M: the CUDA-core and decode kernels take any shape
    if linear.in_features % 16 or linear.out_features % 8:
        return ("in_features % 16 != 0 or out_features % 8 != 0: the Sparse Tensor Core kernels (2:4, V:N:M) need "
                "both; general N:M patterns (e.g. '2:8') take any shape")
    return None


def sparsify(model: nn.Module, pattern: str | Pattern = "2:4", include: Iterable[str] | None = None,
             exclude: Iterable[str] | None = None, *, vector: int = 32, tokens: Iterable[int] = (1, 2048),
             min_speedup: float = 1.0, force: bool = False, fp8: bool = False) -> nn.Module:
    """Replace ``nn.Linear`` layers in place by ``SparseLinear`` (magnitude-pruned to ``pattern``: 2:4, V:N:M or
    general N:M, every pattern ``cutlass_nm.prune`` takes; ``vector``: the general N:M format's rows sharing
    positions) where sparse is faster.

    A layer on a CUDA GPU becomes sparse only if its sparse forward is at least ``min_speedup`` x faster than the
    dense one at every token count (rows of x) in ``tokens``, timed on this GPU (``cutlass_nm.decisions``; each
    distinct shape once, kernels compiled first); otherwise it stays dense. ``force=True`` replaces every layer
    that can run the pattern, untimed. Layers not on a GPU are replaced untimed.

    ``include``/``exclude`` are fnmatch patterns over qualified module names (e.g. ``"*.mlp.*"``). Layers that
    cannot run the pattern (dtype, shape, NaN/Inf weights) stay dense: one warning lists them with the reason. The
    returned module is ``model`` itself, or, for a bare ``nn.Linear`` passed as ``model``, its ``SparseLinear``
    (include/exclude do not apply to it). Its attribute ``sparsify_summary`` (a :class:`SparsifySummary`) says
    what was replaced, skipped (and why), kept dense and excluded, and ``sparsify_summary.table()`` the per-layer
    decisions with their measured speedups. A pattern no family runs raises PatternError. ``fp8=True`` (2:4 only,
    Hopper) stores the kept values in e4m3 with per-channel scales; the layers then quantize x per token.
    """
    p = Pattern.parse(pattern)
    check_runnable(p)
    if fp8 and not p.is_24:
        raise PatternError(f"fp8=True takes the 2:4 pattern, got {p}")
    tokens = tuple(tokens)
    if not tokens or not all(isinstance(t, int) and t >= 1 for t in tokens):
        raise InputError(f"tokens must be positive ints (rows of x to decide at), got {tokens!r}")
    if not min_speedup > 0:
        raise InputError(f"min_speedup must be > 0, got {min_speedup!r}")
    summary = SparsifySummary(str(p))
    include, exclude = list(include or ["*"]), list(exclude or [])
    if type(model) is nn.Linear:
        layers = [(None, "", "", model)]
    else:
        layers = [(module, child_name, f"{name}.{child_name}" if name else child_name, child)
                  for name, module in model.named_modules() for child_name, child in module.named_children()
                  if type(child) is nn.Linear]
    result = model
    runnable = []
    for parent, child_name, qualified, child in layers:
        if parent is not None and (not any(fnmatch.fnmatch(qualified, q) for q in include)
                                   or any(fnmatch.fnmatch(qualified, q) for q in exclude)):
            summary.excluded.append(qualified)
            continue
        reason = _skip_reason(child, p, fp8)
        if reason is None:
            try:
                sparse = SparseLinear.from_linear(child, p, vector=vector, fp8=fp8)
            except CutlassNMError as exc:  # e.g. NaN/Inf weights
                reason = f"{type(exc).__name__}: {exc}"
        if reason is not None:
            summary.skipped[qualified] = reason
            continue
        runnable.append((parent, child_name, qualified, child, sparse))
    if force:
        summary.decisions = [LayerDecision(q, (c.out_features, c.in_features), "sparse", {}, "forced")
                             for _, _, q, c, _ in runnable]
    else:
        summary.decisions = decide([(q, c, sp) for _, _, q, c, sp in runnable], tokens, min_speedup)
    for (parent, child_name, qualified, _, sparse), decision in zip(runnable, summary.decisions, strict=True):
        if decision.decision != "sparse":
            continue
        summary.replaced.append(qualified)
        if parent is None:
            result = sparse
        else:
            setattr(parent, child_name, sparse)
    if summary.kept_dense:
        log.info("sparsify: %d layer(s) kept dense (sparse not %.2fx faster at tokens %s):\n%s",
                 len(summary.kept_dense), min_speedup, tokens, summary.table())
    if summary.skipped:
        total = len(summary.skipped) + len(summary.replaced)
        warnings.warn(f"sparsify: {len(summary.skipped)} of {total} nn.Linear layer(s) left dense (not {p}): "
                      f"{summary.skipped_text()}", stacklevel=2)
    result.sparsify_summary = summary
    return result


class SparseGatedMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))`` (the LLaMA / Mistral / Qwen MLP, no biases) with V:N:M weights: gate and up
    pruned together into one ``256:2:M`` weight (buffers ``gate_up_values``, ``gate_up_columns``, ``gate_up_meta``;
    each of gate and up on its own is ``128:2:M``), ``down_proj`` a ``SparseLinear``. The forward is the custom op
    ``torch.ops.cutlass_nm.vnm_gated_mlp`` (one fused gate/up kernel on Hopper). Inference only."""

    def __init__(self, in_features: int, hidden: int, pattern: str | Pattern = "128:2:8",
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.pattern = Pattern.parse(pattern)
        if self.pattern.v != PAIR_V or hidden % PAIR_V:
            raise PatternError(f"SparseGatedMLP takes {PAIR_V}:2:M patterns and hidden % {PAIR_V} == 0, got "
                               f"{self.pattern} and hidden = {hidden}")
        self.in_features, self.hidden = in_features, hidden
        fused = SparseLinear(in_features, 2 * hidden, False, Pattern(2, self.pattern.m, 2 * PAIR_V), device, dtype)
        for name in ("values", "columns", "meta"):
            self.register_buffer(f"gate_up_{name}", getattr(fused, name))
        self.down_proj = SparseLinear(hidden, in_features, False, self.pattern, device, dtype)

    @classmethod
    def from_linears(cls, gate: nn.Linear, up: nn.Linear, down: nn.Linear,
                     pattern: str | Pattern = "128:2:8") -> SparseGatedMLP:
        """Prune gate and up together and down on its own (magnitude), and compress them."""
        if any(lin.bias is not None for lin in (gate, up, down)):
            raise PatternError("SparseGatedMLP takes bias-free gate, up and down projections")
        w = gate.weight.detach()
        check_runnable(Pattern.parse(pattern), w.dtype)
        mod = cls(gate.in_features, gate.out_features, pattern, w.device, w.dtype)
        fused = fuse_glu(w, up.weight.detach(), mod.pattern)
        mod.gate_up_values.copy_(fused.values)
        mod.gate_up_columns.copy_(fused.columns)
        mod.gate_up_meta.copy_(fused.meta)
        mod.down_proj = SparseLinear.from_linear(down, mod.pattern)
        return mod

    def gate_up(self):
        """The fused gate/up weight as a compressed-weight view over this module's buffers."""
        return vnm_view(self.gate_up_values, self.gate_up_columns, self.gate_up_meta, 2 * PAIR_V, self.pattern.m,
                        self.in_features)

    def _gate_up_view(self):
        """``gate_up()``, kept while the gate/up buffers are the same tensors."""
        return cached_view(self, tuple(self._buffers.values()), self.gate_up)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        """``nn.Module``'s, then the gate/up kernel layouts already built are rebuilt in place (``down_proj``, a
        SparseLinear, does its own)."""
        super()._load_from_state_dict(*args, **kwargs)
        refresh_layouts(self._gate_up_view())

    def dense_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The pruned dense (gate, up, down) weights, decompressed on demand."""
        return (*split_glu(self.gate_up()), self.down_proj.weight_dense())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.down_proj
        if direct_call(x):
            return gated_mlp(x if x.is_contiguous() else x.contiguous(), self._gate_up_view(), d._view())
        return vnm_gated_mlp(x, self.gate_up_values, self.gate_up_columns, self.gate_up_meta, d.values, d.columns,
                             d.meta, self.pattern.m, self.pattern.m, self.in_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, hidden={self.hidden}, pattern={self.pattern}"


GATED_NAMES = ("gate_proj", "up_proj", "down_proj")  # a SwiGLU MLP's projections (LLaMA, Mistral, Qwen)
QKV_NAMES = ("q_proj", "k_proj", "v_proj")  # an attention's projections of one input (LLaMA, Mistral, Qwen2)
STACKED_QKV = "qkv_proj"  # the StackedSparseLinear they become at 2:4


def has_silu(mlp: nn.Module) -> bool:
    """Whether ``mlp``'s activation module (``act_fn``, as transformers names it) is SiLU."""
    return type(getattr(mlp, "act_fn", None)).__name__ in ("SiLU", "SiLUActivation")


FUSED_ROWS = 16  # a StackedSparseLinear's layers run as one kernel up to this many rows of x, above it one GEMM each


class StackedSparseLinear(SparseLinear):
    """2:4 layers of one input stacked by rows (and their biases, all or none), ``sizes`` their out_features in order
    (2:4 runs along in_features, so the stack is each layer's own 2:4). ``forward`` is the stacked layer.
    ``split(x)`` gives each layer's output: one kernel up to ``FUSED_ROWS`` rows of x (and under ``torch.compile``);
    above that, on the GPU, one GEMM a layer on row views of the stack (``parts()``: contiguous outputs, no strided
    halves for what follows).
    ``part(x, i)`` is ``split(x)[i]``, one split shared by the parts taken of one x (``StackedPart``'s forward)."""

    def __init__(self, in_features: int, sizes: Sequence[int], bias: bool = False,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None, *,
                 fp8: bool = False) -> None:
        super().__init__(in_features, sum(sizes), bias, "2:4", device, dtype, fp8=fp8)
        self.sizes = tuple(int(n) for n in sizes)
        self._pending: tuple | None = None  # the last split: (x, x's version, outputs, parts not yet taken)

    @classmethod
    def stack(cls, layers: Sequence[SparseLinear]) -> StackedSparseLinear:
        """Stack 2:4 SparseLinear layers of one in_features (biased or not, FP8 or not, alike) as they are: their
        compressed rows (FP8 scales, biases), nothing pruned again."""
        first = layers[0]
        biased = first.bias is not None
        if not all(isinstance(lin, SparseLinear) and lin.pattern.is_24 and (lin.bias is not None) == biased and
                   (lin.in_features, lin.fp8) == (first.in_features, first.fp8) for lin in layers):
            raise PatternError("StackedSparseLinear.stack takes 2:4 SparseLinear layers of one in_features, biased "
                               "or not and FP8 or not alike")
        stacked = cls(first.in_features, [lin.out_features for lin in layers], biased, first.values.device,
                      first.bias.dtype if biased else None if first.fp8 else first.values.dtype, fp8=first.fp8)
        with torch.no_grad():
            for name, t in (*stacked._buffers.items(), *stacked._parameters.items()):
                t.copy_(torch.cat([getattr(lin, name) for lin in layers]))
        return stacked

    def parts(self) -> tuple[Any, ...]:
        """Each stacked layer's rows as a compressed weight over this module's buffers (built once; kernel layouts of
        their own)."""
        return self._parts()[0]

    def _parts(self) -> tuple[tuple[Any, ...], tuple[torch.Tensor | None, ...]]:
        """(``parts()``, each layer's bias: views of the stacked bias, or None), kept while the tensors are these."""
        def build() -> tuple[tuple[Any, ...], tuple[torch.Tensor | None, ...]]:
            rows = [slice(a, b) for a, b in itertools.pairwise([0, *itertools.accumulate(self.sizes)])]
            if self.fp8:
                weights = tuple(fp8_view(self.values[r], self.meta[r], self.scale[r]) for r in rows)
            else:
                weights = tuple(weight_view(self.values[r], self.meta[r]) for r in rows)
            return weights, tuple(None if self.bias is None else self.bias[r] for r in rows)

        tensors = (*self._buffers.values(), *self._parameters.values())
        return cached_view(self, tensors, build, slot="_cached_parts")

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        """SparseLinear's, then the parts' layouts are rebuilt in place too."""
        super()._load_from_state_dict(*args, **kwargs)
        self.refresh_parts()

    def refresh_parts(self) -> None:
        """Rebuild the parts' kernel layouts in place (the buffers changed in place)."""
        for w in self.parts():
            refresh_layouts(w)

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if x.numel() > FUSED_ROWS * x.shape[-1] and direct_call(x, self.bias):
            x = x if x.is_contiguous() else x.contiguous()
            return tuple(matmul(x, w, b) for w, b in zip(*self._parts(), strict=True))
        return self(x).split(self.sizes, dim=-1)

    def part(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """``split(x)[index]``: the first part taken of ``x`` splits it, the others take their outputs from that
        split until each part was taken once (``x`` the same tensor, unchanged: its version counter, where it has
        one; inference-mode tensors and traced code have none)."""
        pending = self._pending
        version = None if torch.compiler.is_compiling() or x.is_inference() else x._version
        if pending is None or pending[0] is not x or pending[1] != version or index not in pending[3]:
            pending = (x, version, self.split(x), set(range(len(self.sizes))))
        taken = pending[3] - {index}
        self._pending = (*pending[:3], taken) if taken else None
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
    """Replace, in place, ``module``'s children ``names`` (bias-free 2:4 SparseLinear layers of one input, FP8 or
    not alike) by a ``StackedSparseLinear`` child ``stacked_name`` and a ``StackedPart`` under each name; returns the
    stack, or None where the children do not qualify (left as they are)."""
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


class Sparse24GatedMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))`` (the LLaMA / Mistral / Qwen MLP, no biases) with 2:4 weights: gate and up
    stacked into one ``StackedSparseLinear`` ``gate_up`` (gate's rows first), one kernel where there were two up to
    ``FUSED_ROWS`` rows of x; ``down_proj`` a ``SparseLinear``. Inference only."""

    def __init__(self, gate_up: StackedSparseLinear, down_proj: SparseLinear) -> None:
        super().__init__()
        if not isinstance(gate_up, StackedSparseLinear) or gate_up.sizes != (down_proj.in_features,) * 2:
            raise PatternError(f"Sparse24GatedMLP takes a StackedSparseLinear gate_up of 2 x {down_proj.in_features} "
                               f"rows, got {type(gate_up).__name__} with {gate_up.out_features}")
        self.gate_up, self.down_proj = gate_up, down_proj
        self.hidden = down_proj.in_features

    @classmethod
    def from_linears(cls, gate: nn.Linear, up: nn.Linear, down: nn.Linear, *, fp8: bool = False
                     ) -> Sparse24GatedMLP:
        """Prune gate, up and down to 2:4 (magnitude; ``fp8``: as ``SparseLinear.from_linear``'s) and stack gate
        and up (:meth:`from_sparse`: both prune and FP8 scales go row by row, so stacking after is the same)."""
        if any(lin.bias is not None for lin in (gate, up, down)) or gate.weight.shape != up.weight.shape:
            raise PatternError("Sparse24GatedMLP takes bias-free gate, up and down projections, gate and up alike")
        return cls.from_sparse(*(SparseLinear.from_linear(lin, "2:4", fp8=fp8) for lin in (gate, up, down)))

    @classmethod
    def from_sparse(cls, gate: SparseLinear, up: SparseLinear, down: SparseLinear) -> Sparse24GatedMLP:
        """Stack two bias-free 2:4 SparseLinear layers of one shape (and FP8 or not alike) as they are: their
        compressed rows, nothing pruned again."""
        if not (isinstance(down, SparseLinear) and down.pattern.is_24 and down.bias is None) or (
                gate.in_features, gate.out_features) != (up.in_features, up.out_features):
            raise PatternError("Sparse24GatedMLP.from_sparse takes bias-free 2:4 SparseLinear layers, gate and up "
                               "alike")
        return cls(StackedSparseLinear.stack([gate, up]), down)

    def dense_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The pruned dense (gate, up, down) weights, decompressed on demand."""
        gate, up = self.gate_up.weight_dense().split(self.hidden)
        return gate, up, self.down_proj.weight_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up.split(x)
        return self.down_proj(nn.functional.silu(gate) * up)


def sparsify_gated_mlps(model: nn.Module, pattern: str | Pattern = "128:2:8", include: Iterable[str] = ("*mlp",),
                        names: tuple[str, str, str] = GATED_NAMES, *, fp8: bool = False) -> nn.Module:
    """Replace, in place, every module matching ``include`` (fnmatch over qualified names) whose children
    ``names`` (gate, up, down) are bias-free ``nn.Linear`` layers by a ``SparseGatedMLP`` (``128:2:M``) or a
    ``Sparse24GatedMLP`` (``2:4``; ``fp8``: e4m3 weights). Its forward is ``down(silu(gate(x)) * up(x))``: use it
    for models whose MLP computes exactly that (LLaMA, Mistral, Qwen). Other ``nn.Linear`` layers are left to
    ``sparsify``. Returns the same model."""
    include, is_24 = list(include), Pattern.parse(pattern).is_24
    fuse = (functools.partial(Sparse24GatedMLP.from_linears, fp8=fp8) if is_24
            else functools.partial(SparseGatedMLP.from_linears, pattern=pattern))
    rows = 1 if is_24 else PAIR_V  # hidden a multiple of this
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            qualified = f"{name}.{child_name}" if name else child_name
            if not any(fnmatch.fnmatch(qualified, p) for p in include):
                continue
            parts = [getattr(child, n, None) for n in names]
            if not all(type(p) is nn.Linear and p.bias is None for p in parts):
                continue
            if parts[0].out_features % rows:
                log.info("sparsify_gated_mlps: skipping %s: hidden %d is not a multiple of %d", qualified,
                         parts[0].out_features, rows)
                continue
            setattr(module, child_name, fuse(*parts))
    return model


def fuse_sparse_gated_mlps(model: nn.Module, names: tuple[str, str, str] = GATED_NAMES) -> list[str]:
    """Replace, in place, every SiLU MLP whose children ``names`` (gate, up, down) are already bias-free 2:4
    SparseLinear layers (e.g. loaded from a checkpoint) by a ``Sparse24GatedMLP`` stacking them as they are; returns
    the qualified names of the MLPs fused."""
    fused = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            parts = [getattr(child, n, None) for n in names]
            if not has_silu(child) or not all(isinstance(p, SparseLinear) and p.pattern.is_24 and p.bias is None
                                              for p in parts):
                continue
            gate, up = parts[0], parts[1]
            if (gate.out_features, gate.in_features, gate.fp8) != (up.out_features, up.in_features, up.fp8):
                continue
            setattr(module, child_name, Sparse24GatedMLP.from_sparse(*parts))
            fused.append(f"{name}.{child_name}" if name else child_name)
    return fused


def precompile_model(model: nn.Module, tokens: Iterable[int], progress: Callable | None = None) -> int:
    """Compile, in parallel, every kernel the sparse modules of ``model`` on a CUDA GPU run at each count of rows
    in ``tokens`` (batch x sequence of one forward: prefill and decode sizes alike), so that no first call compiles.
    Activations are taken in each module's dtype (FP8 modules: their bias's, else bf16). ``progress``: as
    ``cutlass_nm.kernels.precompile``'s. Returns how many kernels that is (compiled or already cached)."""
    tokens = tuple(tokens)
    kids: dict[tuple, None] = {}
    inside = {id(mod.down_proj) for mod in model.modules() if isinstance(mod, SparseGatedMLP)}
    for mod in model.modules():
        if isinstance(mod, SparseGatedMLP) and mod.gate_up_values.is_cuda:
            gate_up, down = mod._gate_up_view(), mod.down_proj._view()
            for m in tokens:
                kids.update(dict.fromkeys(gated_mlp_kernels(m, gate_up, down, mod.gate_up_values.dtype)))
        elif isinstance(mod, SparseLinear) and mod.values.is_cuda and id(mod) not in inside:
            bias = mod.bias is not None
            dtype = (mod.bias.dtype if bias else torch.bfloat16) if mod.fp8 else mod.values.dtype
            stacked = isinstance(mod, StackedSparseLinear)  # as its split(x) runs: parts above FUSED_ROWS
            kids.update(dict.fromkeys(kernels_for([(m, w, dtype, bias) for m in tokens for w in (
                mod.parts() if stacked and m > FUSED_ROWS else (mod._view(),))])))
    precompile_ids(list(kids), progress)
    return len(kids)


def refresh_module_layouts(model: nn.Module) -> None:
    """Rebuild in place the kernel layouts of every sparse module of ``model`` (after its tensors changed in place
    other than through ``load_state_dict``, e.g. ``tensor.copy_``)."""
    for mod in model.modules():
        if isinstance(mod, SparseLinear):
            refresh_layouts(mod._view())
        elif isinstance(mod, SparseGatedMLP):
            refresh_layouts(mod._gate_up_view())
        if isinstance(mod, StackedSparseLinear):
            mod.refresh_parts()

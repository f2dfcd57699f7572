"""``SparseLinear`` (an ``nn.Linear`` with a 2:4-, V:N:M- or general N:M-compressed weight) and ``sparsify``
(replace a model's ``nn.Linear`` layers where sparse is faster)."""

from __future__ import annotations

import fnmatch
import logging
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..decisions import LayerDecision, decide
from ..dispatch import matmul, remembered_call
from ..errors import CutlassNMError, InputError, PatternError, ShapeError
from ..families.sptc24_fp8_sm90.family import K_MULTIPLE as FP8_K_MULTIPLE
from ..fastcall import fast_call
from ..formats import compress_as, meta_sm90, positions_problem
from ..formats.fp8 import Sparse24FP8Weight, quantize
from ..formats.nm import VECTORS
from ..formats.weight import RememberedCalls, refresh_layouts
from ..ops import (
    forget_layouts,
    fp8_view,
    nm_linear,
    nm_view,
    sparse24_fp8_linear,
    sparse24_linear,
    vnm_linear,
    vnm_view,
    weight_view,
)
from ..patterns import Pattern
from ..routing import check_runnable, unrunnable

log = logging.getLogger("cutlass_nm.nn")


def direct_call(x: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    """Whether a module's forward may launch the kernels itself rather than through its custom op (same result,
    a fraction of the host time): a plain CUDA tensor, outside ``torch.compile``, with no gradient to record."""
    if type(x) is not torch.Tensor or not x.is_cuda or torch.compiler.is_compiling():
        return False
    return not (torch.is_grad_enabled() and (x.requires_grad or (bias is not None and bias.requires_grad)))


def module_fast_call(module: nn.Module, w: Any, x: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor
                     ) -> Callable[[torch.Tensor], torch.Tensor | None] | None:
    """The C++ launch of ``matmul(x, w, bias)`` as ``module``'s forward makes it (``fastcall.fast_call``), or None: it
    holds while the module's buffers and bias are the same tensors at the same addresses and no remembered call was
    forgotten, and sends a call with a gradient to record back to the module's Python path."""
    entry = remembered_call(w, x, bias)
    if entry is None or entry[4] is None:
        return None
    guards = (*((module._buffers, name, t) for name, t in module._buffers.items()),
              (module._parameters, "bias", bias), (RememberedCalls.state, "epoch", RememberedCalls.state["epoch"]))
    return fast_call(entry[0], x, y, guards, bias)


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


CACHED_SLOTS = ("_cached_view", "_cached_parts", "_fast")  # a module's views of its tensors and its C++ launch


def drop_cached(module: nn.Module) -> None:
    """Forget ``module``'s cached weight views, the kernel layouts of its buffers, its C++ launch and a stack's
    pending split: each holds the module's tensors as they were, so a device move (``.cpu()``) kept the old copy
    alive, and a cast (``.half()``) kept layouts of the old values under the unchanged metadata."""
    for slot in CACHED_SLOTS:
        module.__dict__.pop(slot, None)
    forget_layouts(module._buffers.values())
    if module.__dict__.get("_pending") is not None:
        module.__dict__["_pending"] = None


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
    buffers. 2:4: ``values`` (out x in/2) and ``meta`` (uint8, the packed metadata of formats/sparse24.py). V:N:M
    (``"128:2:8"``): ``values`` (out x 2G), ``columns`` (ceil(out/V) x G x 4, uint8) and ``meta`` (out x G,
    uint8), G = ceil(in/M). General N:M (``"3:7"``): ``values`` (out x G·N) and ``indices`` (ceil(out/vector) x
    G·N, uint8: the kept positions, shared by ``vector`` consecutive rows; see formats/nm.py).

    Takes every pattern ``cutlass_nm.prune`` takes (PatternError, naming the rule, for the others). The module may
    be built in any float dtype and cast later (``.half()``); its forward takes x in the weight's dtype, under
    ``matmul``'s input rules on every device (2:4 and V:N:M: fp16/bf16; general N:M also fp32)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, pattern: str | Pattern = "2:4",
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None, *,
                 vector: int = 32, fp8: bool = False) -> None:
        super().__init__()
        self.pattern = Pattern.parse(pattern)
        check_runnable(self.pattern)
        if dtype is not None and dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise InputError(f"SparseLinear's dtype is float16, bfloat16 or float32 (FP8: fp8=True), got {dtype}")
        if in_features < 1 or out_features < 1:
            raise ShapeError(f"SparseLinear needs in_features and out_features >= 1, got {in_features} and "
                             f"{out_features}")
        if fp8 and (not self.pattern.is_24 or in_features % FP8_K_MULTIPLE):
            raise PatternError(f"FP8 SparseLinear is 2:4 with in_features % {FP8_K_MULTIPLE} == 0, got "
                               f"{self.pattern} and in_features = {in_features}")
        self.fp8 = fp8
        if self.pattern.is_24 and in_features % 4:
            raise PatternError(f"2:4 needs in_features % 4 == 0, got {in_features}")
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
        if p.is_24:
            meta = torch.full(meta_sm90.packed_shape(out_features, in_features), meta_sm90.PAD_BYTE, device=device,
                              dtype=torch.uint8)
            self.register_buffer("meta", meta)
        elif p.is_vnm:
            self.register_buffer("meta", torch.full((out_features, groups), 0x4, device=device, dtype=torch.uint8))
        self.bias = nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype)) if bias else None

    @classmethod
    def from_linear(cls, linear: nn.Linear, pattern: str | Pattern = "2:4", *, prune: bool = True,
                    vector: int = 32, fp8: bool = False) -> SparseLinear:
        """Compress ``linear``'s weight (magnitude-pruned to the pattern unless ``prune=False``; ``fp8``: its kept
        values in e4m3 with per-output-channel scales, 2:4 only, Hopper); refused as ``cutlass_nm.prune`` refuses
        (pattern, dtype, NaN/Inf, shape), naming the rule."""
        if not isinstance(linear, nn.Linear):
            raise InputError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
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

    def _apply(self, fn: Callable, recurse: bool = True) -> SparseLinear:
        """``nn.Module``'s (``.to()``, ``.cpu()``, ``.half()``) after :func:`drop_cached`: old tensors are freed. An
        FP8 module's per-channel scales stay float32 (moved, never cast: ``.half()`` rounded them)."""
        drop_cached(self)
        scale = self._buffers.get("scale")
        out = super()._apply(fn, recurse)
        if scale is not None and self._buffers["scale"].dtype != torch.float32:
            self._buffers["scale"] = scale.to(self._buffers["scale"].device)
        return out

    def __getstate__(self) -> dict[str, Any]:
        """The module's state without its C++ launch (rebuilt by the next call)."""
        state = super().__getstate__()
        state.pop("_fast", None)
        return state

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list, unexpected_keys: list, error_msgs: list) -> None:
        """``nn.Module``'s, then the kernel layouts already built from the old weight are rebuilt in place. Position
        tensors (``meta``, ``columns``, ``indices``) that break the pattern are refused, the module left as it was
        (``load_state_dict`` raises), since a kernel would read them as a silently wrong weight. A 2:4 ``meta`` of
        per-group nibbles (``out x in/4``, as state dicts of earlier versions hold it) is packed first."""
        if (why := _pack_old_meta(self, state_dict, prefix)) is not None:
            error_msgs.append(f"{prefix or 'the module'}: {why} (a {self.pattern} weight's positions)")
            return
        incoming = {name: t for name in ("meta", "columns", "indices")
                    if isinstance(t := state_dict.get(prefix + name), torch.Tensor) and name in self._buffers
                    and t.shape == self._buffers[name].shape}
        if (why := positions_problem(self.pattern, incoming)) is not None:
            error_msgs.append(f"{prefix or 'the module'}: {why} (a {self.pattern} weight's positions)")
            return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        refresh_layouts(self._view())

    def weight_dense(self) -> torch.Tensor:
        """The (pruned) dense weight, decompressed on demand."""
        return self.compressed().to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            fast = self.__dict__.get("_fast")
            y = None if fast is None else fast(x)  # the last direct call's launch, from C++, while x fits it
            if y is not None:
                return y
        if not isinstance(x, torch.Tensor):
            raise InputError(f"{type(self).__name__} takes a tensor, got {type(x).__name__}")
        bias = self._parameters.get("bias")
        if direct_call(x, bias):
            view = self._view()
            if not x.is_contiguous():
                return matmul(x.contiguous(), view, bias)
            y = matmul(x, view, bias)
            self.__dict__["_fast"] = module_fast_call(self, view, x, bias, y)
            return y
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


def _pack_old_meta(module: SparseLinear, state_dict: dict, prefix: str) -> str | None:
    """Replace, in ``state_dict``, a 2:4 module's ``meta`` given as per-group nibbles (``out x in/4`` uint8, one a
    byte: the format before the packed one) by its packed form; None, or why those nibbles are invalid."""
    t = state_dict.get(prefix + "meta")
    own = module._buffers.get("meta")
    groups_shape = (module.out_features, module.in_features // 4)
    if not module.pattern.is_24 or not isinstance(t, torch.Tensor) or own is None or t.shape == own.shape \
            or tuple(t.shape) != groups_shape or t.dtype != torch.uint8:
        return None
    if (why := positions_problem(module.pattern, {"meta": t}, groups=True)) is not None:
        return why
    state_dict[prefix + "meta"] = meta_sm90.pack(t.to(own.device), module.in_features)
    return None


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
             min_speedup: float = 1.0, force: bool = False, fp8: bool = False, progress: bool = True) -> nn.Module:
    """Replace ``nn.Linear`` layers in place by ``SparseLinear`` (magnitude-pruned to ``pattern``: 2:4, V:N:M or
    general N:M, every pattern ``cutlass_nm.prune`` takes; ``vector``: the general N:M format's rows sharing
    positions) where sparse is faster.

    A layer on a CUDA GPU becomes sparse only if its sparse forward is at least ``min_speedup`` x faster than the
    dense one at every token count (rows of x) in ``tokens``, timed on this GPU (``cutlass_nm.decisions``; each
    distinct shape once, kernels compiled first); otherwise it stays dense. ``force=True`` replaces every layer
    that can run the pattern, untimed. Layers not on a GPU are replaced untimed. ``progress``: counted bars on
    stderr while that compiles and times.

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
    if not isinstance(model, nn.Module):
        raise InputError(f"sparsify takes an nn.Module (a model or an nn.Linear), got {type(model).__name__}")
    tokens = tuple(tokens)
    if not tokens or not all(isinstance(t, int) and t >= 1 for t in tokens):
        raise InputError(f"tokens must be positive ints (rows of x to decide at), got {tokens!r}")
    if not min_speedup > 0:
        raise InputError(f"min_speedup must be > 0, got {min_speedup!r}")
    summary = SparsifySummary(str(p))
    include = [include] if isinstance(include, str) else list(include or ["*"])  # one pattern, or several
    exclude = [exclude] if isinstance(exclude, str) else list(exclude or [])
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
        summary.decisions = decide([(q, c, sp) for _, _, q, c, sp in runnable], tokens, min_speedup, progress)
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

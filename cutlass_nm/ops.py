"""``torch.ops.cutlass_nm.sparse24_linear``, ``vnm_linear`` and ``nm_linear``: matmul as torch.library custom ops.

They take the weight's canonical tensors (values, metadata, V:N:M's column indices, N:M's position indices), so
they work under ``torch.compile(fullgraph=True)`` (a fake implementation gives the output's shape) and inside
CUDA-graph capture (kernel layouts are built once per weight, before capture, and cached). On a CPU tensor they
compute the same function through the decompressed weight (a reference path) under exactly matmul's input rules
(``dispatch.check_inputs`` without the CUDA-device rule), so a CPU test catches what the GPU path refuses. Both
paths take x of any strides (made contiguous first, as ``nn.Linear`` takes them).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable

import torch

from .dispatch import check_inputs, matmul
from .errors import InputError
from .formats import Sparse24Weight
from .formats.fp8 import E4M3, Sparse24FP8Weight, dequantize_rows, quantize_rows
from .formats.nm import NMWeight
from .formats.vnm import VNMWeight
from .formats.weight import Layouts, RememberedCalls
from .patterns import Pattern

# Kernel layouts per weight, keyed by its metadata tensor (storage, offset and shape: row slices of one stack apart).
# An entry lives as long as the metadata tensor that made it (a module's buffer; a weak reference drops the entry,
# and the layouts with it, when the module is freed), so a freed weight's layouts never outlive it and a reused
# address never finds them. It also records the values tensor it was made with (storage, offset, dtype): a weight
# whose values were replaced while its metadata stayed (a module cast to another dtype) starts a fresh entry, since
# its layouts hold the old values.
_LAYOUTS: dict[tuple[int, int, tuple[int, ...]], tuple[weakref.ref, Layouts, tuple]] = {}


def _layout_cache(meta: torch.Tensor, values: torch.Tensor) -> Layouts:
    """The kernel-layout cache shared by every view of the weight whose metadata is ``meta`` and values ``values``.
    Layouts must not hold ``meta`` itself (an alias of its storage is fine), or the entry would keep itself alive."""
    try:
        key = (meta.untyped_storage().data_ptr(), meta.storage_offset(), tuple(meta.shape))
        made_with = (values.untyped_storage().data_ptr(), values.storage_offset(), values.dtype)
    except RuntimeError:  # a wrapper tensor without real storage (e.g. under functionalization): no caching
        return Layouts()
    entry = _LAYOUTS.get(key)
    owner = entry[0]() if entry is not None else None
    if owner is None or owner.untyped_storage().data_ptr() != key[0] or entry[2] != made_with:
        if owner is not None:  # stale layouts of a live weight: calls remembered on them resolve again
            RememberedCalls.forget()
        entry = (weakref.ref(meta, functools.partial(_forget, key)), Layouts(), made_with)
        _LAYOUTS[key] = entry
    return entry[1]


def forget_layouts(tensors: Iterable[torch.Tensor]) -> None:
    """Drop the cached layouts of the weights whose metadata lives in any of ``tensors``' storages (a module about to
    be moved or cast: its layouts hold its old tensors, which are then freed at once)."""
    storages = {t.untyped_storage().data_ptr() for t in tensors if t is not None and t.device.type != "meta"}
    for key in [k for k in _LAYOUTS if k[0] in storages]:
        del _LAYOUTS[key]
    RememberedCalls.forget()


def _forget(key: tuple[int, int, tuple[int, ...]], ref: weakref.ref) -> None:
    """The metadata tensor behind ``ref`` was freed: drop its entry (unless a newer one took the key)."""
    entry = _LAYOUTS.get(key)
    if entry is not None and entry[0] is ref:
        del _LAYOUTS[key]


def weight_view(values: torch.Tensor, meta: torch.Tensor) -> Sparse24Weight:
    """A Sparse24Weight over existing tensors, sharing one layout cache per metadata storage."""
    shape = (int(values.shape[0]), int(values.shape[1]) * 2)
    return Sparse24Weight(values, meta, shape, _layout_cache(meta, values))


def fp8_view(values: torch.Tensor, meta: torch.Tensor, scale: torch.Tensor) -> Sparse24FP8Weight:
    """An FP8 2:4 weight over existing tensors (``values``: the e4m3 bytes, stored as uint8 so that module casts
    leave them alone), with the shared layout cache."""
    shape = (int(values.shape[0]), int(values.shape[1]) * 2)
    w = Sparse24FP8Weight(values.view(E4M3), meta, shape, scale=scale.float())
    w.__dict__["_layouts"] = _layout_cache(meta, values)
    return w


def vnm_view(values: torch.Tensor, columns: torch.Tensor, meta: torch.Tensor, v: int, m: int, k: int) -> VNMWeight:
    """A V:N:M weight (``v:2:m``, ``k`` in_features) over existing tensors, with the shared layout cache."""
    w = VNMWeight(values, columns, meta, (int(values.shape[0]), k), Pattern(2, m, v))
    w.__dict__["_layouts"] = _layout_cache(meta, values)
    return w


def nm_view(values: torch.Tensor, indices: torch.Tensor, n: int, m: int, k: int, vector: int) -> NMWeight:
    """A general N:M weight (``n:m``, ``k`` in_features, positions shared by ``vector`` rows) over existing tensors,
    with the shared layout cache (keyed by ``indices``)."""
    w = NMWeight(values, indices, (int(values.shape[0]), k), Pattern(n, m), vector)
    w.__dict__["_layouts"] = _layout_cache(indices, values)
    return w


def linear(x: torch.Tensor, w: Sparse24Weight | VNMWeight | NMWeight, bias: torch.Tensor | None) -> torch.Tensor:
    """The ops' forward: ``matmul`` on a CUDA x, else the reference through the decompressed weight after the same
    input checks (all but x's device)."""
    x = x.contiguous()
    if x.is_cuda:
        return matmul(x, w, bias)
    check_inputs(x, w, bias, cuda=False)
    return torch.nn.functional.linear(x, w.to_dense(), bias)


def clear_layout_cache() -> None:
    """Forget every cached kernel layout of the modules' weights; each is built again on its next use. (A freed
    weight's layouts go with it; after changing a module's weights in place, ``nn.refresh_module_layouts``
    rebuilds them where they are, which CUDA graphs captured before need.)"""
    for _, cache, _ in _LAYOUTS.values():
        cache.clear()
        cache.builders.clear()
    _LAYOUTS.clear()
    RememberedCalls.forget()  # their launches hold the layouts dropped here


@torch.library.custom_op("cutlass_nm::sparse24_linear", mutates_args=())
def sparse24_linear(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x · Wᵀ (+ bias) for a 2:4 weight given as (values, meta)."""
    return linear(x, weight_view(values, meta), bias)


@sparse24_linear.register_fake
def _(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    torch._check(x.shape[-1] == values.shape[1] * 2, lambda: "x's last dim must equal the weight's in_features")
    return x.new_empty((*x.shape[:-1], values.shape[0]))


def _setup_context(ctx, inputs, output) -> None:
    x, values, meta, bias = inputs
    ctx.save_for_backward(values, meta)
    ctx.has_bias = bias is not None
    ctx.x_dtype = x.dtype


def _backward(ctx, grad):
    """Gradients for x and bias (the compressed weight is a frozen buffer): dx = dy · W, db = Σ dy."""
    values, meta = ctx.saved_tensors
    w = weight_view(values, meta).to_dense().to(grad.dtype)
    grad_x = (grad @ w).to(ctx.x_dtype)
    grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.has_bias else None
    return grad_x, None, None, grad_bias


sparse24_linear.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("cutlass_nm::sparse24_fp8_linear", mutates_args=())
def sparse24_fp8_linear(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, scale: torch.Tensor,
                        bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x · Wᵀ (+ bias) for an FP8 2:4 weight given as (values as uint8, meta, scale); x fp16/bf16, quantized per
    token as on the GPU (the CPU path computes the same through the dequantized operands). Inference only."""
    w = fp8_view(values, meta, scale)
    x = x.contiguous()
    if x.is_cuda:
        return matmul(x, w, bias)
    if x.dtype not in (torch.float16, torch.bfloat16) or x.shape[-1] != w.in_features:
        raise InputError(f"x must be float16/bfloat16 with {w.in_features} features, got {x.dtype} "
                         f"{tuple(x.shape)}")
    q, sx = quantize_rows(x.reshape(-1, x.shape[-1]).float(), check=False)
    xd = dequantize_rows(q, sx).reshape(x.shape)
    return torch.nn.functional.linear(xd, w.to_dense(), None if bias is None else bias.float()).to(x.dtype)


@sparse24_fp8_linear.register_fake
def _(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, scale: torch.Tensor,
      bias: torch.Tensor | None = None) -> torch.Tensor:
    torch._check(x.shape[-1] == values.shape[1] * 2, lambda: "x's last dim must equal the weight's in_features")
    return x.new_empty((*x.shape[:-1], values.shape[0]))


@torch.library.custom_op("cutlass_nm::vnm_linear", mutates_args=())
def vnm_linear(x: torch.Tensor, values: torch.Tensor, columns: torch.Tensor, meta: torch.Tensor, v: int, m: int,
               k: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x · Wᵀ (+ bias) for a V:N:M (``v:2:m``) weight given as (values, columns, meta)."""
    return linear(x, vnm_view(values, columns, meta, v, m, k), bias)


@vnm_linear.register_fake
def _(x: torch.Tensor, values: torch.Tensor, columns: torch.Tensor, meta: torch.Tensor, v: int, m: int, k: int,
      bias: torch.Tensor | None = None) -> torch.Tensor:
    torch._check(x.shape[-1] == k, lambda: "x's last dim must equal the weight's in_features")
    return x.new_empty((*x.shape[:-1], values.shape[0]))


def _vnm_setup_context(ctx, inputs, output) -> None:
    x, values, columns, meta, v, m, k, bias = inputs
    ctx.save_for_backward(values, columns, meta)
    ctx.pattern, ctx.has_bias, ctx.x_dtype = (v, m, k), bias is not None, x.dtype


def _vnm_backward(ctx, grad):
    values, columns, meta = ctx.saved_tensors
    w = vnm_view(values, columns, meta, *ctx.pattern).to_dense().to(grad.dtype)
    grad_x = (grad @ w).to(ctx.x_dtype)
    grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.has_bias else None
    return grad_x, None, None, None, None, None, None, grad_bias


vnm_linear.register_autograd(_vnm_backward, setup_context=_vnm_setup_context)


@torch.library.custom_op("cutlass_nm::nm_linear", mutates_args=())
def nm_linear(x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, n: int, m: int, k: int, vector: int,
              bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x · Wᵀ (+ bias) for a general N:M (``n:m``) weight given as (values, indices), positions shared by
    ``vector`` consecutive rows (``formats.nm``)."""
    return linear(x, nm_view(values, indices, n, m, k, vector), bias)


@nm_linear.register_fake
def _(x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, n: int, m: int, k: int, vector: int,
      bias: torch.Tensor | None = None) -> torch.Tensor:
    torch._check(x.shape[-1] == k, lambda: "x's last dim must equal the weight's in_features")
    return x.new_empty((*x.shape[:-1], values.shape[0]))


def _nm_setup_context(ctx, inputs, output) -> None:
    x, values, indices, n, m, k, vector, bias = inputs
    ctx.save_for_backward(values, indices)
    ctx.pattern, ctx.has_bias, ctx.x_dtype = (n, m, k, vector), bias is not None, x.dtype


def _nm_backward(ctx, grad):
    values, indices = ctx.saved_tensors
    w = nm_view(values, indices, *ctx.pattern).to_dense().to(grad.dtype)
    grad_x = (grad @ w).to(ctx.x_dtype)
    grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.has_bias else None
    return grad_x, None, None, None, None, None, None, grad_bias


nm_linear.register_autograd(_nm_backward, setup_context=_nm_setup_context)


@torch.library.custom_op("cutlass_nm::vnm_gated_mlp", mutates_args=())
def vnm_gated_mlp(x: torch.Tensor, gu_values: torch.Tensor, gu_columns: torch.Tensor, gu_meta: torch.Tensor,
                  down_values: torch.Tensor, down_columns: torch.Tensor, down_meta: torch.Tensor, gu_m: int,
                  down_m: int, k: int) -> torch.Tensor:
    """down(silu(x·Gᵀ) ⊙ (x·Uᵀ)) for a fused ``256:2:gu_m`` gate/up weight and a ``128:2:down_m`` down weight
    (``gated_mlp``). Inference only: no autograd formula is registered."""
    from .gated_mlp import check_pair, gated_mlp, reference

    gate_up = vnm_view(gu_values, gu_columns, gu_meta, 256, gu_m, k)
    down = vnm_view(down_values, down_columns, down_meta, 128, down_m, int(gu_values.shape[0]) // 2)
    x = x.contiguous()
    if x.is_cuda:
        return gated_mlp(x, gate_up, down)
    check_pair(gate_up, down)  # gated_mlp's rules, but x's device
    check_inputs(x, gate_up, None, cuda=False)
    return reference(x, gate_up, down)


@vnm_gated_mlp.register_fake
def _(x: torch.Tensor, gu_values: torch.Tensor, gu_columns: torch.Tensor, gu_meta: torch.Tensor,
      down_values: torch.Tensor, down_columns: torch.Tensor, down_meta: torch.Tensor, gu_m: int, down_m: int,
      k: int) -> torch.Tensor:
    torch._check(x.shape[-1] == k, lambda: "x's last dim must equal the gate/up weight's in_features")
    return x.new_empty((*x.shape[:-1], down_values.shape[0]))

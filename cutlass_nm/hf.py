"""``sparsify_model``: N:M-sparse attention and MLP projections for a ``transformers`` causal LM (LLaMA, Mistral,
Qwen2 and models built like them), in place::

    from transformers import AutoModelForCausalLM, CompileConfig
    from cutlass_nm.hf import sparsify_model

    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16).cuda()
    sparsify_model(model, "2:4")            # gate/up fused per MLP, q/k/v stacked; o, down sparse where faster
    print(model.sparsify_summary.table())   # per-layer decisions (.fused, .stacked; .notes: lm_head, ...)
    model.generate(input_ids, max_new_tokens=32)                       # eager
    model.generate(input_ids, max_new_tokens=32, cache_implementation="static",
                   compile_config=CompileConfig(fullgraph=True))      # static cache: torch.compile + CUDA graphs

This module finds the decoder layers by their attributes (modules with ``self_attn`` and ``mlp`` children) and
imports nothing from ``transformers``, which stays an optional extra.
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from .decisions import LayerDecision, decide
from .errors import InputError, PatternError
from .formats.glu import PAIR_V
from .nn import (
    GATED_NAMES,
    QKV_NAMES,
    STACKED_QKV,
    Sparse24GatedMLP,
    SparseGatedMLP,
    SparseLinear,
    SparsifySummary,
    StackedPart,
    has_silu,
    sparsify,
    sparsify_gated_mlps,
    stack_sparse_linears,
)
from .nn.linear import _skip_reason
from .patterns import Pattern
from .routing import check_runnable

SILU = ("silu", "swish")


@dataclass
class ModelSparsifySummary(SparsifySummary):
    """``SparsifySummary`` plus the MLPs whose gate and up became one kernel's weight (``fused``; their
    projections are also in ``replaced``), the MLPs not fused and why (``not_fused``), the attentions whose q/k/v
    became one stacked weight (``stacked``; their decisions say so), and ``notes`` (e.g. a tied
    ``lm_head`` kept dense)."""

    fused: list[str] = field(default_factory=list)
    not_fused: dict[str, str] = field(default_factory=dict)
    stacked: list[str] = field(default_factory=list)  # attentions whose q/k/v became one stacked weight
    notes: list[str] = field(default_factory=list)


def decoder_layers(model: nn.Module) -> list[str]:
    """Qualified names of the modules with both ``self_attn`` and ``mlp`` children (the decoder layers)."""
    return [name for name, mod in model.named_modules()
            if all(isinstance(getattr(mod, child, None), nn.Module) for child in ("self_attn", "mlp"))]


def _fuse_refusal(mlp: nn.Module, pattern: Pattern, act: str | None, fp8: bool = False) -> str | None:
    """Why ``mlp``'s gate and up cannot run as one fused weight of ``pattern`` (None: they can)."""
    if act is None and not has_silu(mlp):
        return "the MLP's activation (act_fn) is not SiLU"
    if act is not None and act not in SILU:
        return f"config.hidden_act is {act!r}, not 'silu'"
    parts = [getattr(mlp, n, None) for n in GATED_NAMES]
    if not all(type(p) is nn.Linear for p in parts):
        return f"the MLP has no nn.Linear {'/'.join(GATED_NAMES)}"
    if any(p.bias is not None for p in parts):
        return "the MLP has biases"
    gate, up, down = parts
    if not gate.out_features == up.out_features == down.in_features or gate.in_features != up.in_features:
        return "gate_proj, up_proj and down_proj do not form a gated MLP (their shapes differ)"
    if pattern.is_vnm and gate.out_features % PAIR_V:
        return f"intermediate size {gate.out_features} is not a multiple of {PAIR_V}"
    return next((why for p in parts if (why := _skip_reason(p, pattern, fp8)) is not None), None)


def _tied(model: nn.Module, head: nn.Module) -> bool:
    get_in = getattr(model, "get_input_embeddings", None)
    emb = get_in() if callable(get_in) else None
    return bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False)) or (
        emb is not None and getattr(emb, "weight", None) is getattr(head, "weight", ()))


def sparsify_model(model: nn.Module, pattern: str | Pattern = "2:4", *, tokens: Iterable[int] = (1, 2048),
                   min_speedup: float = 1.0, force: bool = False, include_lm_head: bool = False,
                   fuse_gate_up: bool = True, stack_qkv: bool = True, exclude: Iterable[str] = (),
                   vector: int = 32, fp8: bool = False, progress: bool = True) -> nn.Module:
    """Sparsify a decoder-only LM in place: every ``nn.Linear`` of its decoder layers (attention q/k/v/o, MLP
    gate/up/down) becomes ``pattern``-sparse where sparse is faster (``cutlass_nm.sparsify``'s rule: timed on the
    GPU at ``tokens`` against ``min_speedup``, untimed off the GPU or with ``force``).

    With ``fuse_gate_up`` and a ``2:4`` or ``128:2:M`` pattern, each SwiGLU MLP (``config.hidden_act == "silu"``,
    bias-free ``gate_proj``/``up_proj``/``down_proj``; for ``128:2:M`` an intermediate size a multiple of 128)
    becomes one ``Sparse24GatedMLP`` (gate and up stacked) or ``SparseGatedMLP`` (pruned together): one gate/up
    kernel; on the GPU only where gate, up and down each win as sparse layers.
    The others are sparsified layer by layer. With ``stack_qkv``, an attention whose ``q_proj``, ``k_proj`` and
    ``v_proj`` all became sparse (V:N:M and N:M: q and k filling whole blocks of rows) runs them as one
    ``StackedSparseLinear`` ``qkv_proj`` (one kernel where there were three up to 16 rows of x;
    ``StackedPart`` modules keep their names). Embeddings stay dense; ``lm_head`` too,
    unless ``include_lm_head`` and it is not tied to the input embedding. ``exclude``: fnmatch patterns over
    qualified names kept dense; ``vector``, ``fp8`` (2:4 weights in e4m3 with per-channel scales, Hopper) and
    ``progress`` (counted bars on stderr while kernels compile and layer shapes are timed): as in ``sparsify``.

    Returns ``model`` with ``model.sparsify_summary``, a :class:`ModelSparsifySummary`. InputError if no decoder
    layer is found."""
    p = Pattern.parse(pattern)
    check_runnable(p)
    if fp8 and not p.is_24:
        raise PatternError(f"fp8=True takes the 2:4 pattern, got {p}")
    tokens, exclude = tuple(tokens), [exclude] if isinstance(exclude, str) else list(exclude)
    if not tokens or not all(isinstance(t, int) and t >= 1 for t in tokens) or not min_speedup > 0:
        raise InputError(f"tokens must be positive ints and min_speedup > 0, got {tokens!r} and {min_speedup!r}")
    if not isinstance(model, nn.Module):
        raise InputError(f"sparsify_model takes an nn.Module (a transformers model), got {type(model).__name__}")
    layers = decoder_layers(model)
    if not layers:
        raise InputError(f"no decoder layers (modules with 'self_attn' and 'mlp' children) in {type(model).__name__}")
    modules = dict(model.named_modules())
    include = [f"{name}.*" for name in layers]
    notes, fused, not_fused, fused_decisions = [], [], {}, []
    get_out = getattr(model, "get_output_embeddings", None)
    head = get_out() if callable(get_out) else getattr(model, "lm_head", None)
    head_name = next((n for n, m in modules.items() if m is head), None) if isinstance(head, nn.Linear) else None
    if include_lm_head and head_name is not None:
        if _tied(model, head):
            notes.append(f"{head_name} is tied to the input embedding: kept dense")
        else:
            include.append(head_name)
    elif head_name is not None:
        notes.append(f"{head_name} kept dense (include_lm_head=False)")

    if fuse_gate_up and not (p.is_24 or (p.is_vnm and p.v == PAIR_V)):
        notes.append(f"gate/up not fused: fusing takes 2:4 and {PAIR_V}:2:M patterns, got {p}")
    elif fuse_gate_up:
        act = getattr(getattr(model, "config", None), "hidden_act", None)
        candidates = []
        for name in (f"{layer}.mlp" for layer in layers):
            own = (name, *(f"{name}.{n}" for n in GATED_NAMES))
            excluded = any(fnmatch.fnmatch(x, q) for x in own for q in exclude)
            why = "excluded" if excluded else _fuse_refusal(modules[name], p, act, fp8)
            if why is None:
                candidates.append(name)
            else:
                not_fused[name] = why
        parts = [(f"{name}.{n}", getattr(modules[name], n)) for name in candidates for n in GATED_NAMES]
        if force:
            decisions = [LayerDecision(q, (lin.out_features, lin.in_features), "sparse", {}, "forced")
                         for q, lin in parts]
        else:  # the fused MLP runs where its three projections each win as sparse layers
            decisions = decide([(q, lin, SparseLinear.from_linear(lin, p, fp8=fp8)) for q, lin in parts], tokens,
                               min_speedup, progress)
        for i, name in enumerate(candidates):
            mine = decisions[3 * i:3 * i + 3]
            if all(d.decision == "sparse" for d in mine):
                fused.append(name)
                for d in mine:
                    d.how = f"fused gate/up ({d.how})"
                fused_decisions += mine
            else:
                not_fused[name] = f"sparse gate/up/down not {min_speedup}x faster: {', '.join(d.row() for d in mine)}"
        if fused:
            sparsify_gated_mlps(model, p, include=fused, names=GATED_NAMES, fp8=fp8)

    sparsify(model, p, include, exclude, vector=vector, tokens=tokens, min_speedup=min_speedup, force=force, fp8=fp8,
             progress=progress)
    stacked = [f"{layer}.self_attn" for layer in layers if stack_qkv and
               stack_sparse_linears(modules[f"{layer}.self_attn"], QKV_NAMES, STACKED_QKV) is not None]
    base = model.sparsify_summary
    in_stacks = {f"{attn}.{n}" for attn in stacked for n in QKV_NAMES}
    for d in base.decisions:
        if d.name in in_stacks:
            d.how = f"stacked q/k/v ({d.how})"
    summary = ModelSparsifySummary(**vars(base), fused=fused, not_fused=not_fused, stacked=stacked, notes=notes)
    order = {name: i for i, name in enumerate(modules)}  # module order, from before the fusion
    summary.replaced = sorted([d.name for d in fused_decisions] + summary.replaced, key=order.__getitem__)
    summary.decisions = sorted(fused_decisions + summary.decisions, key=lambda d: order[d.name])
    model.sparsify_summary = summary
    return model


COMPILED_CALL = ("_compiled_call", "_last_compile_config")  # what generate() keeps on a model it compiled


def masked_dense_twin(dense: nn.Module, sparse: nn.Module) -> nn.Module:
    """A copy of ``dense`` (the model as it was before ``sparsify_model``) whose sparsified weights are replaced by
    their pruned dense weights: the function ``sparse`` must compute, for checking it. transformers' compiled
    forward (``_compiled_call``, bound to ``dense``) is not copied: the twin compiles its own."""
    ref = copy.deepcopy(dense)
    for attr in COMPILED_CALL:
        ref.__dict__.pop(attr, None)
    mods = dict(ref.named_modules())
    gated = {name for name, mod in sparse.named_modules() if isinstance(mod, SparseGatedMLP | Sparse24GatedMLP)}
    with torch.no_grad():
        for name, mod in sparse.named_modules():
            if name in gated:
                for proj, w in zip(GATED_NAMES, mod.dense_weights(), strict=True):
                    getattr(mods[name], proj).weight.copy_(w)
            elif isinstance(mod, StackedPart) or (isinstance(mod, SparseLinear) and name in mods and
                                                  name.rpartition(".")[0] not in gated):
                mods[name].weight.copy_(mod.weight_dense())
    return ref

"""``matmul``: the hot path. Checks inputs, finds the kernel for this problem in a dict, launches.

The first call for a problem takes the slow path (:func:`_resolve`): pick the family for the GPU,
ask the config selector (default, in order: the user's tuning database, ``$CUTLASS_NM_DB`` or the user cache's
SQLite, ``CUTLASS_NM_DB=off`` disables it; the configs shipped in the package for this GPU,
``CUTLASS_NM_SHIPPED=off`` disables them; the config model's prediction from the nearest tuned problems), fall back
to the family's heuristic, compile or load the kernel. :func:`resolved` tells which config each problem got and
where it came from. Later calls do no I/O: one dict lookup, then the launch.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch

from .errors import InputError, ShapeError
from .families import FAMILIES, Family, KernelTypes, Problem, get_family
from .families.launch import capturing, dtype_name, torch_dtype
from .fastcall import fast_call
from .formats import Sparse24Weight
from .formats.fp8 import E4M3, FP8_WEIGHTS, NMFP8Weight, Sparse24FP8Weight, VNMFP8Weight
from .formats.nm import NMWeight
from .formats.vnm import VNMWeight
from .formats.weight import RememberedCalls
from .kernels import get_kernel
from .patterns import Pattern
from .routing import FP8_DECODE, FP8_GEMM, WEIGHTS, default_family, fp8_decodes, fp8_twin

Selector = Callable[[Family, Problem], Any]  # returns a Config or a store.chooser.Choice, or None: the heuristic
_selector: Selector | None = None
_RESOLVED: dict[tuple, Callable] = {}
_CHOSEN: dict[tuple, tuple[str, Any, str]] = {}  # matmul's key -> (family, config, config source)
_IN_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # f32: general N:M on CUDA cores (nm_simt) only
FP8_OUT = (torch.bfloat16, torch.float16)  # what an FP8 matmul writes (and the 16-bit x it quantizes)
_NO_CALLS: dict = {}
MAX_CALLS = 64  # call signatures (x shape, dtype, device, bias, out dtype, family) remembered per weight
_REFUSED_WARNED: set[str] = set()  # families whose selected config check() refused (warned once each)
_TWIN_WARNED: set[type] = set()  # FP8 weight classes whose 16-bit twin was built (warned once each)
FP8Weight = Sparse24FP8Weight | NMFP8Weight | VNMFP8Weight
log = logging.getLogger("cutlass_nm.dispatch")


def set_selector(selector: Selector | None) -> None:
    """Install the config source consulted on a problem's first call; None restores the default (tuning DB)."""
    global _selector
    if selector is not None and not callable(selector):
        raise InputError(f"a selector is called as selector(family, problem); got a {type(selector).__name__}")
    _selector = selector
    RememberedCalls.forget()  # the calls weights remember resolve again
    _RESOLVED.clear()
    _CHOSEN.clear()


def _default_selector() -> Selector:
    """The tuning database at its default URL, read-only (never created, migrated or changed; silent while it does not
    exist yet); ``CUTLASS_NM_DB=off`` turns it off. An unreachable, slow, locked or foreign database warns once and
    the heuristic configs run: every wait is bounded by ``$CUTLASS_NM_DB_TIMEOUT`` seconds (default 5), a writer's
    lock by 0.5 s."""
    global _selector
    from .store.chooser import default_chooser

    _selector = default_chooser()
    return _selector


def resolved() -> list[dict]:
    """Each problem ``matmul`` has resolved in this process: m, n, k, pattern, family (``forced``: named by the
    caller), config and ``config_source`` (``user``, ``shipped``, ``model`` or ``heuristic``)."""
    return [{"m": key[0], "n": key[1], "k": key[2], "pattern": str(key[9]), "family": family,
             "forced": key[7] is not None, "config": cfg.to_record(), "config_source": source}
            for key, (family, cfg, source) in _CHOSEN.items()]



def matmul(x: torch.Tensor, w: Sparse24Weight | VNMWeight | NMWeight, bias: torch.Tensor | None = None, *,
           out_dtype: torch.dtype | None = None, out: torch.Tensor | None = None,
           family: str | None = None, x_scale: torch.Tensor | None = None) -> torch.Tensor:
    """y = x · Wᵀ (+ bias), the ``nn.Linear`` convention, with W compressed 2:4 or V:N:M (Sparse Tensor
    Cores) or general N:M (CUDA cores).

    x is ``(..., k)`` fp16/bf16 (or fp32 with a general N:M weight: CUDA cores) on a CUDA device; the result
    is ``(..., n)`` in ``out_dtype`` (default: x's dtype), written into ``out`` when given. ``family`` forces a
    kernel family. With an FP8 weight (``cutlass_nm.quantize``), x is e4m3 with ``x_scale`` (float32: one per
    token, or one for the tensor), or fp16/bf16, quantized per token here (used as it is at one token, where the
    FP8 decode path runs); the output defaults to bf16 (to x's dtype for a 16-bit x).
    """
    if out is None and x_scale is None and type(x) is torch.Tensor:
        # steady state: this weight already ran x's shape, dtype and device with this bias (checked then); only
        # what may differ per tensor of that signature is checked again
        calls = getattr(w, "__dict__", _NO_CALLS).get("_calls")
        if calls is not None and calls[0] == RememberedCalls.epoch:
            call = calls[1].get((x.shape, x.dtype, x.device, _bias_id(bias), out_dtype, family))  # _call_key, inline
            if call is not None and call[4] is not None:  # checks x, allocates y and launches in one C++ call
                y = call[4](x)
                if y is not None:
                    return y
            if call is not None and x.is_contiguous() and not x.data_ptr() % 16:
                kernel, y_like, flat, _, _ = call
                y = torch.empty_like(y_like, memory_format=torch.contiguous_format)
                if flat is None:
                    kernel(x, w, bias, y)
                else:
                    kernel(x.view(flat[0]), w, bias, y.view(flat[1]))
                return y
    if not isinstance(x, torch.Tensor):  # before any path reads x's dtype
        raise InputError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if type(w) in FP8_WEIGHTS:
        return _matmul_fp8(x, w, bias, x_scale, out_dtype, out, family)
    if x_scale is not None:
        raise InputError("x_scale goes with an FP8 weight (cutlass_nm.quantize(w)); this weight is "
                         f"{type(w).__name__}")
    return _matmul(x, w, bias, out_dtype, out, family)


def _matmul(x: torch.Tensor, w: Sparse24Weight | VNMWeight | NMWeight, bias: torch.Tensor | None,
            out_dtype: torch.dtype | None, out: torch.Tensor | None, family: str | None) -> torch.Tensor:
    """matmul with every input check; remembers the call on the weight for the steady-state path."""
    given_dtype = out_dtype
    out_dtype = out_dtype or (out.dtype if out is not None else x.dtype)
    check_inputs(x, w, bias)
    n = w.out_features
    flat = x.dim() == 2
    x2 = x if flat else x.reshape(-1, x.shape[-1])
    m = x2.shape[0]
    if out is None:
        y2 = torch.empty((m, n), dtype=out_dtype, device=x.device)
        y = y2 if flat else y2.view(*x.shape[:-1], n)
    else:
        y = _check_out(out, (*x.shape[:-1], n), out_dtype, x.device)
        y2 = y if flat else y.view(-1, n)
    if m == 0:
        return y
    key = (m, n, w.in_features, x.dtype, out_dtype, bias is not None, x.device, family, type(w), w.pattern,
           w.vector if isinstance(w, NMWeight) else 0)
    kernel = _RESOLVED.get(key)
    if kernel is None:
        kernel = _resolve(key)
    kernel(x2, w, bias, y2)
    if _rememberable(x, out):
        steady = getattr(kernel, "steady", None)  # a launcher's repeat of this call, its arguments fixed once
        call = kernel if steady is None else steady(x2, w, bias, y2)
        views = None if flat or getattr(call, "any_shape", False) else ((m, x.shape[-1]), (m, n))
        fast = fast_call(call, x, y) if views is None else None
        _remember(w, _call_key(x, bias, given_dtype, family), (call, _like(y), views, bias, fast))
    return y


def _matmul_fp8(x: torch.Tensor, w: FP8Weight, bias: torch.Tensor | None, x_scale: torch.Tensor | None,
                out_dtype: torch.dtype | None, out: torch.Tensor | None, family: str | None) -> torch.Tensor:
    """matmul for an FP8 weight: x e4m3 with its scale, or fp16/bf16 quantized per token (amax / 448) for the GEMM
    and taken as it is by the one-token decode path."""
    given_dtype = out_dtype
    out_dtype = out_dtype or (out.dtype if out is not None else fp8_default_out(x.dtype))
    check_fp8_inputs(x, w, bias, x_scale, out_dtype)
    n, k = w.out_features, w.in_features
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    if fp8_twin(type(w), m, family) is not None:
        if family is not None:
            gemm = f" or {FP8_GEMM[type(w)]} (forced)" if type(w) in FP8_GEMM else ""
            raise InputError(f"an FP8 {w.pattern} weight runs {FP8_DECODE[type(w)]} (one token) or, at more tokens, "
                             f"its 16-bit twin{gemm}; family={family!r} does not run it")
        return _matmul_twin(x, w, bias, x_scale, out_dtype, out, given_dtype)
    y = _check_out(out, (*x.shape[:-1], n), out_dtype, x.device) if out is not None else torch.empty(
        (*x.shape[:-1], n), dtype=out_dtype, device=x.device)
    if m == 0:
        return y
    key, decode = _fp8_key(m, w, x.dtype, out_dtype, bias is not None, x.device, family)
    kernel = _RESOLVED.get(key) or _resolve(key)
    if decode:  # x as it comes, with its scale (e4m3) or none (16 bits)
        kernel(x2, w, bias, y.view(m, n), x_scale)
        if _rememberable(x, out, x_scale):  # matmul's steady-state path takes it next
            _remember(w, _call_key(x, bias, given_dtype, family),
                      (kernel, _like(y), None if x.dim() == 2 else ((m, k), (m, n)), bias, None))
        return y
    xq, sx = (x2, x_scale.reshape(-1)) if x.dtype == E4M3 else kernel.quantize(x2)
    kernel(xq, w, bias, y.view(m, n), sx)
    steady = getattr(kernel, "steady", None)  # a 16-bit x's quantization and GEMM as one remembered call
    if steady is not None and _rememberable(x, out, x_scale):
        call = steady(x2, w, bias, y.view(m, n))
        if call is not None:
            _remember(w, _call_key(x, bias, given_dtype, family),
                      (call, _like(y), None, bias, fast_call(call, x, y)))
    return y


def _matmul_twin(x: torch.Tensor, w: NMFP8Weight | VNMFP8Weight, bias: torch.Tensor | None,
                 x_scale: torch.Tensor | None, out_dtype: torch.dtype, out: torch.Tensor | None,
                 given_dtype: torch.dtype | None) -> torch.Tensor:
    """An FP8 N:M or V:N:M weight above the decode path (no FP8 GEMM forced): x (an e4m3 x dequantized with its
    scale) against the weight's 16-bit twin in the output dtype, built on first use and kept on the weight. A 16-bit
    x in the output dtype leaves the twin's remembered call on the FP8 weight too (matmul's steady-state path)."""
    if x.dtype == E4M3:
        k = w.in_features
        x = (x.reshape(-1, k).float() * x_scale.reshape(-1, 1)).to(out_dtype).reshape(x.shape)
        return _matmul(x, _twin(w, out_dtype), bias, out_dtype, out, None)
    twin = _twin(w, out_dtype)
    y = _matmul(x.to(out_dtype), twin, bias, out_dtype, out, None)
    if x.dtype == out_dtype and _rememberable(x, out, x_scale):
        entry = remembered_call(twin, x, bias, out_dtype)
        if entry is not None:
            _remember(w, _call_key(x, bias, given_dtype, None),
                      (_on_twin(entry[0], twin), *entry[1:]))
    return y


def _twin(w: NMFP8Weight | VNMFP8Weight, dtype: torch.dtype) -> NMWeight | VNMWeight:
    """The 16-bit twin of an FP8 weight in ``dtype``, built once and kept on it."""
    return w.layout(("twin", dtype), _twin_builder(dtype))


def _on_twin(call: Callable, twin: NMWeight | VNMWeight) -> Callable:
    """A remembered call of ``twin`` made callable with its FP8 weight in the weight's place."""
    def go(x: torch.Tensor, w: Any, bias: torch.Tensor | None, y: torch.Tensor) -> None:
        call(x, twin, bias, y)
    return go


@functools.cache
def _twin_builder(dtype: torch.dtype) -> Callable[[Any], Any]:
    """The layout builder of a weight's 16-bit twin in ``dtype`` (one function per dtype, not one per call)."""
    def build(w: NMFP8Weight | VNMFP8Weight) -> NMWeight | VNMWeight:
        if type(w) not in _TWIN_WARNED:
            _TWIN_WARNED.add(type(w))
            log.warning("cutlass_nm: FP8 %s weights run FP8 at one token; at more tokens each runs as a %s copy of its "
                        "values (built once per weight, %.1f MB for this one), faster than the FP8 V:N:M GEMM "
                        "(family='vnm_fp8_sm90' forces it)", w.pattern, dtype, w.values.numel() * dtype.itemsize / 1e6)
        return w.dequantized(dtype)
    return build


def fp8_default_out(x_dtype: torch.dtype) -> torch.dtype:
    """An FP8 matmul's output dtype when none is given: a 16-bit x's own, else (e4m3 x) bf16."""
    return x_dtype if x_dtype in FP8_OUT else torch.bfloat16


def _fp8_key(m: int, w: FP8Weight, x_dtype: torch.dtype, out_dtype: torch.dtype, has_bias: bool,
             device: torch.device, family: str | None) -> tuple[tuple, bool]:
    """matmul's problem key for an FP8 weight, and whether it runs the decode path, whose kernel takes x's dtype
    (the GEMM's takes e4m3: a 16-bit x is quantized first)."""
    decode = fp8_decodes(m, family)
    return _key(m, w, x_dtype if decode else E4M3, out_dtype, has_bias, device, family), decode


def check_fp8_inputs(x: torch.Tensor, w: FP8Weight, bias: torch.Tensor | None, x_scale: torch.Tensor | None,
                     out_dtype: torch.dtype) -> None:
    """matmul's input rules for an FP8 weight: its dtype rules and x_scale's, then the shared ones (the bias in
    the output dtype)."""
    if not isinstance(x, torch.Tensor):
        raise InputError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in (E4M3, *FP8_OUT):
        raise InputError(f"with an FP8 weight, x must be float8_e4m3fn (with x_scale) or float16/bfloat16 "
                         f"(quantized per token here), got {x.dtype}")
    if out_dtype not in FP8_OUT:
        raise InputError(f"an FP8 matmul writes float16 or bfloat16, got out_dtype {out_dtype}")
    _check_operands(x, w, bias, out_dtype, "the output dtype")
    rows = x.numel() // w.in_features
    if x.dtype == E4M3:
        if not isinstance(x_scale, torch.Tensor) or x_scale.dtype != torch.float32 or x_scale.numel() not in (1, rows) \
                or not x_scale.is_contiguous() or x_scale.device != x.device:
            raise InputError(f"an e4m3 x needs x_scale: a contiguous float32 tensor on {x.device} of {rows} values "
                             "(one per token) or 1 (per tensor)")
    elif x_scale is not None:
        raise InputError("x_scale goes with an e4m3 x; a float16/bfloat16 x is quantized per token here (used as "
                         "it is at one token)")


def _call_key(x: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype | None, family: str | None
              ) -> tuple:
    """A remembered call's key on its weight: x's signature, the bias, the out_dtype asked for and the forced family
    (matmul's steady path builds the same tuple inline)."""
    return (x.shape, x.dtype, x.device, _bias_id(bias), out_dtype, family)


def _bias_id(bias: torch.Tensor | None) -> tuple[int, int] | None:
    """The bias in a remembered call's key: the object (held by the entry, so its id is not reused) and its data
    (``bias.data = ...`` gives the same object other data, checked again)."""
    return None if bias is None else (id(bias), bias.data_ptr())


def _rememberable(x: torch.Tensor, out: torch.Tensor | None, x_scale: torch.Tensor | None = None) -> bool:
    """Whether a call may be remembered for the steady path: a plain tensor x, no ``out`` or x scale, and not while a
    CUDA graph is being captured (a repeat built then would hold the graph's scratch; capture runs the full path)."""
    return out is None and x_scale is None and type(x) is torch.Tensor and not capturing()


def _like(y: torch.Tensor) -> torch.Tensor:
    """A remembered call's output template: y's shape, dtype and device over one element (``torch.empty_like`` of it,
    contiguous, allocates the next output with less host time than ``torch.empty``)."""
    return y.new_empty(()).expand(y.shape)


def _remember(w: Any, key: tuple, call: tuple) -> None:
    """Keep ``call`` (kernel, output template (``_like``), the 2-D views it takes or None, bias, its C++ launch
    (``fastcall.fast_call``) or None) for ``key`` on the weight, at most ``MAX_CALLS`` signatures."""
    calls = w.__dict__.get("_calls")
    if calls is None or calls[0] != RememberedCalls.epoch or len(calls[1]) >= MAX_CALLS:
        calls = w.__dict__["_calls"] = (RememberedCalls.epoch, {})
    calls[1][key] = call


def remembered_call(w: Any, x: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype | None = None
                    ) -> tuple | None:
    """The call ``matmul(x, w, bias, out_dtype=out_dtype)`` remembered on ``w`` (see ``_remember``), or None."""
    calls = w.__dict__.get("_calls")
    if calls is None or calls[0] != RememberedCalls.epoch:
        return None
    return calls[1].get(_call_key(x, bias, out_dtype, None))


def kernel_for(family: str, x2: torch.Tensor, w: VNMWeight, out_dtype: torch.dtype) -> Callable:
    """The kernel ``family`` runs for ``x2`` (m x k) against ``w`` with no bias: matmul's cached resolution, for
    callers that chain kernels (``gated_mlp``); the first call per problem compiles or loads it."""
    key = _key(x2.shape[0], w, x2.dtype, out_dtype, False, x2.device, family)
    return _RESOLVED.get(key) or _resolve(key)


def check_inputs(x: torch.Tensor, w: Sparse24Weight | VNMWeight | NMWeight, bias: torch.Tensor | None, *,
                 cuda: bool = True) -> None:
    """Every input rule of ``matmul``, cheapest first. ``cuda=False`` skips only the one rule a CPU reference path
    cannot meet (x on a CUDA device): the custom ops' CPU path applies exactly the rest."""
    if not isinstance(w, WEIGHTS):
        raise InputError(f"w must be a compressed weight (cutlass_nm.compress(w, '2:4')), got {type(w).__name__}")
    if w.out_features < 1 or w.in_features < 1:
        raise ShapeError(f"the weight is empty (shape {tuple(w.shape)}); no kernel takes n = 0 or k = 0")
    if not isinstance(x, torch.Tensor):
        raise InputError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _IN_DTYPES:
        raise InputError(f"x must be float16, bfloat16 or float32 (N:M weights only), got {x.dtype}")
    if x.dtype == torch.float32 and not isinstance(w, NMWeight):
        raise InputError(f"x must be float16 or bfloat16 for a {type(w).__name__} (Tensor Cores); float32 runs "
                         "with general N:M weights (cutlass_nm.prune(w, 'N:M') of an fp32 weight, CUDA cores)")
    if x.dtype != w.dtype:
        raise InputError(f"dtype mismatch: x is {x.dtype}, the weight is {w.dtype}")
    _check_operands(x, w, bias, x.dtype, "x's dtype", cuda)


def _check_operands(x: torch.Tensor, w: Any, bias: torch.Tensor | None, bias_dtype: torch.dtype, bias_what: str,
                    cuda: bool = True) -> None:
    """The rules every matmul shares, after its dtype rules: x's shape, layout and device, and the bias (of
    ``bias_dtype``, named ``bias_what`` in the message)."""
    if x.dim() < 1 or x.shape[-1] != w.in_features:
        raise InputError(f"x's last dim {tuple(x.shape)[-1:]} must equal the weight's in_features {w.in_features}")
    if not x.is_contiguous():
        raise InputError("x must be contiguous; call x.contiguous()")
    if x.data_ptr() % 16:
        raise InputError("x's data must be 16-byte aligned (TMA needs it); a sliced view may not be: use x.clone()")
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.shape != (w.out_features,):
            raise InputError(f"bias must be a tensor of shape ({w.out_features},)")
        if bias.dtype != bias_dtype:
            raise InputError(f"bias dtype {bias.dtype} must match {bias_what} {bias_dtype}")
        if not bias.is_contiguous() or bias.data_ptr() % 16:
            raise InputError("bias must be contiguous and 16-byte aligned")
        if bias.device != x.device:
            raise InputError(f"device mismatch: bias is on {bias.device}, x on {x.device}")
    if cuda and not x.is_cuda:
        raise InputError(f"x must be a CUDA tensor, got one on {x.device}; move it to a CUDA device (x.cuda())")
    if w.device != x.device:
        raise InputError(f"device mismatch: x is on {x.device}, the weight on {w.device}; use w.to(x.device)")


def _check_out(out: torch.Tensor | None, shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    if out.shape != shape or out.dtype != dtype or out.device != device:
        raise InputError(f"out must be {tuple(shape)} {dtype} on {device}, got {tuple(out.shape)} {out.dtype} "
                         f"on {out.device}")
    if not out.is_contiguous() or out.data_ptr() % 16:
        raise InputError("out must be contiguous and 16-byte aligned")
    return out


def _key(m: int, w: Sparse24Weight | VNMWeight | NMWeight, dtype: torch.dtype, out_dtype: torch.dtype, has_bias: bool,
         device: torch.device, family: str | None = None, kind: type | None = None) -> tuple:
    """matmul's problem key (matmul builds the same tuple inline: the hot path); ``kind``: the weight class the
    kernel runs, if not ``w``'s own (an FP8 weight's 16-bit twin)."""
    return (m, w.out_features, w.in_features, dtype, out_dtype, has_bias, device, family, kind or type(w), w.pattern,
            w.vector if isinstance(w, NMWeight) else 0)


def kernels_for(problems: list[tuple[int, Any, torch.dtype, bool]], family: str | None = None) -> list[tuple]:
    """The kernel ids ``matmul`` will run for (m, weight, x dtype, bias?) problems (``family``: forced, as
    ``matmul(..., family=...)`` forces it), without duplicates; nothing is compiled."""
    kids = {}
    for m, w, dtype, has_bias in problems:
        if (twin := fp8_twin(type(w), m, family)) is not None:  # the 16-bit twin's kernel, in x's dtype
            key = _key(m, w, dtype, dtype, has_bias, w.device, family, twin)
        elif isinstance(w, FP8_WEIGHTS):  # dtype is x's and the output's
            key, _ = _fp8_key(m, w, dtype, fp8_default_out(dtype), has_bias, w.device, family)
        else:
            key = _key(m, w, dtype, dtype, has_bias, w.device, family)
        fam, cfg, _, problem = _choose(key)
        kids[(fam.name, cfg, problem.types)] = None
    return list(kids)


def precompile_for(problems: list[tuple[int, Any, torch.dtype, bool]], progress: Callable | None = None, *,
                   family: str | None = None) -> None:
    """Compile, in parallel, the kernels ``matmul`` will pick for (m, weight, x dtype, bias?) problems, so that
    their first calls only load them (``family`` and ``progress``: see ``kernels_for``, ``kernels.precompile``)."""
    precompile_ids(kernels_for(problems, family), progress)


def precompile_ids(kids: list[tuple], progress: Callable | None = None) -> None:
    """Compile kernel ids in parallel ahead of use, and the C++ launch extension beside them (``fastcall``: where it
    is on); failures are logged (their first call raises them)."""
    from .fastcall import beside
    from .kernels import precompile

    results = beside(lambda: precompile(kids, progress=progress) if kids else [])
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        log.warning("cutlass_nm: %d kernel(s) failed to compile ahead of use: %s", len(failed), failed[0])


def _resolve(key: tuple) -> Callable:
    """Slow path, once per problem: choose family and config, compile or load, remember. ``key`` is matmul's:
    (m, n, k, dtype, out_dtype, bias, device, family, weight type, pattern, vector (N:M weights; else 0))."""
    family, cfg, source, problem = _choose(key)
    kernel = get_kernel((family.name, cfg, problem.types))
    _RESOLVED[key] = kernel
    _CHOSEN[key] = (family.name, cfg, source)
    return kernel


def default_choice(problem: Problem, kind: type, selector: Selector) -> tuple[Family, Any, str, Problem]:
    """What matmul runs ``problem`` (types by name; e4m3: an FP8 weight's GEMM, or its decode path at one token)
    with on an sm_90 GPU when ``selector`` chooses the configs (e.g. the shipped configs without a user DB): the
    family, config, config source and the family's problem. Needs no weight and no GPU: for planning."""
    t = problem.types
    key = (problem.m, problem.n, problem.k, torch_dtype(t.dtype), torch_dtype(t.out_dtype), t.bias, None, None, kind,
           Pattern.parse(problem.pattern), problem.vector)
    return _choose(key, selector)


def _choose(key: tuple, selector: Selector | None = None) -> tuple[Family, Any, str, Problem]:
    """The family, config, config source and problem of matmul's ``key`` (no compile), chosen by ``selector``
    (default: the one ``set_selector`` set, else the user DB and shipped configs)."""
    m, n, k, dtype, out_dtype, has_bias, device, family_name, kind, pattern, vector = key
    family_name = family_name or default_family(device, kind, m, dtype, pattern, vector, k)
    if family_name not in FAMILIES:
        raise ShapeError(f"no kernel family {family_name!r} is built into this version for {kind.__name__} "
                         f"weights at m={m}; known families: {sorted(FAMILIES)}")
    family = get_family(family_name)
    if not family.runs(kind):
        raise ShapeError(f"{family.name} runs {family.weight.__name__} weights, got a {kind.__name__}")
    if dtype_name(dtype) not in family.input_dtypes:  # f32: the CUDA-core family only
        raise InputError(f"{family.name} takes {'/'.join(family.input_dtypes)} inputs, "
                         f"got {dtype}")
    problem = Problem(m, n, k, KernelTypes(dtype_name(dtype), dtype_name(out_dtype), has_bias), str(pattern),
                      vector)
    cfg, source = _config_of((selector or _selector or _default_selector())(family, problem))
    if cfg is not None and (why := family.check(cfg, problem)) is not None:
        # e.g. a DB winner tuned on vector-32 weights offered for a vector-1 weight of the same shape (the DB key
        # has no vector): never launched, the heuristic runs instead
        level = logging.DEBUG if family.name in _REFUSED_WARNED else logging.WARNING
        log.log(level, "cutlass_nm: %s's selected config %s cannot run %s: %s; using the heuristic config",
                family.name, cfg, problem, why)
        _REFUSED_WARNED.add(family.name)
        cfg = None
    if cfg is None:
        cfg, source = family.heuristic(problem), "heuristic"
    reason = family.check(cfg, problem)
    if reason is not None:
        raise ShapeError(f"{family.name} cannot run (m, n, k) = ({m}, {n}, {k}): {reason}")
    return family, cfg, source, problem


def _config_of(answer: Any) -> tuple[Any, str]:
    """(config or None, source) of a selector's answer: a ``Choice``, a bare config (a custom selector: "user"), or
    None."""
    from .store.chooser import Choice

    if isinstance(answer, Choice):
        return answer
    return answer, "user"


def use_tuning_db(url: str | None = None, objective: str | None = None) -> Selector:
    """Make ``matmul`` consult the tuning database at ``url`` (default ``$CUTLASS_NM_DB`` / user cache), choosing
    winners by ``objective`` (default ``$CUTLASS_NM_OBJECTIVE`` or "time"); the shipped configs and the config model
    follow it."""
    from .store.chooser import default_chooser

    if url is not None and not isinstance(url, str):
        raise InputError(f"use_tuning_db takes a database URL string (or None: the default), got "
                         f"{type(url).__name__}")
    selector = default_chooser(url, db=True, objective=objective, quiet_if_missing=False)
    set_selector(selector)
    return selector

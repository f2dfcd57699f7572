"""A Hugging Face LLaMA end to end: dense against sparse (``cutlass_nm.hf.sparsify_model``), one process.

    python3 benchmarks/bench_hf.py --out results/h100/hf_llama3_8b.json            # LLaMA-3-8B shape, fp16
    python3 benchmarks/bench_hf.py --dtypes bf16 --patterns 2:4 --no-compile       # a subset
    python3 benchmarks/bench_hf.py --tiny --device cpu --no-compile                # the script itself, small model
    python3 benchmarks/bench_hf.py --compile-only && python3 benchmarks/bench_hf.py   # compile first, then time

The model is built from a ``LlamaConfig`` with random weights (no download): LLaMA-3-8B's shape (32 layers, hidden
4096, MLP 14336, GQA 32/8 heads, vocab 128256), or a 2-layer one with ``--tiny``. For each dtype, the dense model
and each pattern (the default path: ``sparsify_model`` decides per layer at ``tokens=(1, 2048)``) give rows of
the list below, every model's eager rows before any model's compiled decode (the models wait on the CPU between):

* ``prefill_ms``: one forward over batch x 2048 tokens (1 and 4 sequences; ``logits_to_keep=1``, as generate's
  prefill), wall time after a sync, the median over ``--reps`` rounds in which the models take turns (all on the
  GPU), each running ``--prefill-block`` forwards in a row whose first two are untimed: a prefill runs at the power
  limit, so each model is timed at its own clock, not at the one the model before it left (the rows carry the
  GPU's power and SM clock, ``power_w`` / ``sm_clock_mhz`` and dense's);
* ``decode_tok_s``: ``generate()`` tokens per second at batch 1 and 16, greedy, eager and with a static cache +
  ``torch.compile`` (CUDA graphs), from the difference of two generation lengths (the prefill cancels), the median
  of ``--decode-reps`` such pairs. Eager decode is host-bound and the host's speed drifts, so the models take turns:
  all of them sit on the GPU and each round times one pair of every model;
* ``weight_gb`` (parameters and buffers, each storage once) and ``peak_gb`` (peak allocated during one decode of
  the longer length, the model alone on the GPU; mode ``long_prompt``: one generate() after a --prefill-tokens
  prompt, whose prefill and decode both run);
* ``linear_ms``: one step's projections and MLPs alone (each layer's module once, weights cold, in a CUDA graph),
  per decode batch and per prefill, with ``by_kind`` (and ``linear_gb``'s bytes ``by_kind``: q/k/v, o, MLP,
  lm_head); the compiled decode and prefill rows carry ``ceiling``, the speedup left if the
  rest of the step stays as dense's and the projections reach the ideal (decode: dense's bandwidth over the
  sparse weights' bytes, ``linear_gb``; prefill: 1 / density, the sparse tensor cores' rate);
* ``rel_err``: the logits' relative difference against the same model with masked dense weights (and, as
  ``rel_err_vs_fp32`` / ``dense_rel_err_vs_fp32``, of the sparse and the masked dense model against that model in
  fp32: the dtype's own noise on this model).

Each row carries ``speedup_vs_dense`` (or the ratio to dense for memory).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from cutlass_nm.bench.energy import EnergyMeter, open_meter

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
LLAMA3_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "rope_theta": 500000.0, "max_position_embeddings": 8192}
FAILURES: list[dict] = []  # measurements that raised (kept in the result JSON)
DETAILS: dict[tuple[str, str, int, str], dict] = {}  # ("<dtype> <model>", metric, batch, mode): a row's extra fields
SETTLE = 2  # untimed forwards at the start of each model's block of prefills (the power limit's state settles)
PROMPT = 32  # generate()'s prompt tokens per sequence
ERR_TOKENS = 128  # the prompt rel_err compares logits on
START = time.monotonic()
TINY = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 512}


def say(msg: str) -> None:
    """One progress line, with the seconds since the script started (where a long run spends its time)."""
    print(f"[{time.monotonic() - START:6.0f} s] {msg}", flush=True)


def build(shape: dict, dtype: torch.dtype, device: str) -> nn.Module:
    """A random-weight LlamaForCausalLM of ``shape``, initialised directly on ``device`` in ``dtype``."""
    import transformers

    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**shape))
    finally:
        torch.set_default_dtype(default)
    return model.eval()


def weight_gb(*modules: nn.Module) -> float:
    """Bytes of the modules' parameters and buffers, each storage counted once, in GB."""
    seen: dict[int, int] = {}
    for mod in modules:
        for t in (*mod.parameters(), *mod.buffers()):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values()) / 1e9


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def prefill_ms(models: dict[str, nn.Module], batch: int, tokens: int, device: str, rounds: int, block: int,
               meter: EnergyMeter | None = None) -> dict[str, dict[str, float]]:
    """Each model's median wall time of one forward over batch x tokens (last position's logits only): ``rounds``
    rounds in which every model in turn runs ``block`` forwards in a row, the first ``SETTLE`` of them untimed.
    A prefill runs at the GPU's power limit, whose state carries over from the forwards before: one model timed
    right after another inherits that model's clock. Each model is timed in its own steady state, as a user running
    it sees it. ``{name: {"ms": ..., "power_w": ..., "sm_clock_mhz": ...}}``; the average power over all its timed
    forwards and the median SM clock after each come from ``meter`` (NVML) where given, else they are absent."""
    ids = torch.randint(0, next(iter(models.values())).config.vocab_size, (batch, tokens), device=device)
    times: dict[str, list[float]] = {name: [] for name in models}
    clocks: dict[str, list[float]] = {name: [] for name in models}
    energy = {name: [0.0, 0.0] for name in models}  # joules and seconds over the timed forwards
    with torch.no_grad():
        for _ in range(rounds):
            for name, model in models.items():
                for i in range(block):
                    _sync(device)
                    if i == SETTLE and meter is not None:
                        mj, start = meter.millijoules(), time.perf_counter()
                    t0 = time.perf_counter()
                    model(input_ids=ids, logits_to_keep=1, use_cache=False)
                    _sync(device)
                    if i >= SETTLE:
                        times[name].append((time.perf_counter() - t0) * 1e3)
                        if meter is not None:
                            clocks[name].append(meter.sm_clock_mhz())
                if meter is not None and block > SETTLE:
                    energy[name][0] += (meter.millijoules() - mj) / 1e3
                    energy[name][1] += time.perf_counter() - start
    out: dict[str, dict[str, float]] = {}
    for name in models:
        out[name] = {"ms": statistics.median(times[name])}
        if clocks[name]:
            out[name].update(power_w=energy[name][0] / energy[name][1], sm_clock_mhz=statistics.median(clocks[name]))
    return out


def generate_s(model: nn.Module, batch: int, n: int, device: str, compiled: bool, prompt: int = PROMPT) -> float:
    """Seconds of one greedy generate() of ``n`` new tokens after a ``prompt``-token prompt, at ``batch``."""
    import transformers

    ids = torch.randint(0, model.config.vocab_size, (batch, prompt), device=device)
    kw: dict = {"do_sample": False, "pad_token_id": 0}
    if compiled:
        kw.update(cache_implementation="static", compile_config=transformers.CompileConfig(fullgraph=True))
    _sync(device)
    t0 = time.perf_counter()
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, **kw)
    _sync(device)
    assert out.shape[1] == ids.shape[1] + n
    return time.perf_counter() - t0


def decode_tok_s(models: dict[str, nn.Module], batch: int, device: str, compiled: bool, steps: tuple[int, int],
                 reps: int = 3) -> dict[str, float]:
    """Greedy generate() tokens per second of each model at ``batch``, from two generation lengths (prefill cancels
    out): the median over ``reps`` rounds, after a warm-up round (which compiles); each round times one pair of
    every model in turn. A model that raises is recorded in FAILURES and leaves the rotation."""
    if compiled:
        torch._dynamo.reset()
    rates: dict[str, list[float]] = {name: [] for name in models}
    for rep in range(reps + 1):
        for name, model in models.items():
            if name not in rates:
                continue
            try:
                times = {n: generate_s(model, batch, n, device, compiled) for n in steps}
            except Exception as exc:  # one failing model leaves the others measured
                FAILURES.append({"model": name, "metric": "decode_tok_s", "m": batch,
                                 "mode": "compiled" if compiled else "eager",
                                 "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                say(f"{name}: decode batch {batch} FAILED: {FAILURES[-1]['error']}")
                del rates[name]
                continue
            if rep:
                rates[name].append(batch * (steps[1] - steps[0]) / (times[steps[1]] - times[steps[0]]))
    return {name: statistics.median(r) for name, r in rates.items()}


PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp")


def projections(model: nn.Module) -> dict[str, list[nn.Module]]:
    """Each decoder layer's projection modules by name (MLPs whole: gate, up, activation and down; q/k/v stacked
    into ``qkv_proj``: the stack, once), and lm_head."""
    from cutlass_nm.nn import QKV_NAMES, STACKED_QKV

    layers = model.model.layers
    stacked = hasattr(layers[0].self_attn, STACKED_QKV)
    names = [n for n in PROJECTIONS if not (stacked and n.rpartition(".")[2] in QKV_NAMES)]
    return {**{name: [layer.get_submodule(name) for layer in layers]
               for name in ([f"self_attn.{STACKED_QKV}"] if stacked else []) + names}, "lm_head": [model.lm_head]}


def linear_ms(model: nn.Module, batch: int, seq: int = 1) -> dict[str, float]:
    """Device time of one step's projections over batch x seq tokens, per kind of ``projections``: every layer's
    module called once in a CUDA graph (each weight read cold, as in the step; a stacked q/k/v through ``split``,
    as its parts run it), summed over the layers."""
    from cutlass_nm.timing import time_rotating

    kinds = {}
    with torch.no_grad():
        for kind, mods in projections(model).items():
            dtype = next(t.dtype for t in (*mods[0].parameters(), *mods[0].buffers()) if t.is_floating_point())
            width = getattr(mods[0], "in_features", model.config.hidden_size)
            x = torch.randn(batch, seq, width, device="cuda").to(dtype if dtype.itemsize == 2 else torch.bfloat16)
            calls = [getattr(mod, "split", mod) for mod in mods]  # a stack: as its parts run it (split)
            kinds[kind] = time_rotating(lambda i, calls=calls, x=x: calls[i](x), len(mods), reps=50).p50_ms * len(mods)
    return kinds


def linear_gb(model: nn.Module) -> dict[str, float]:
    """Bytes of the modules ``linear_ms`` times, per kind, in GB."""
    return {kind: weight_gb(*mods) for kind, mods in projections(model).items()}


def ceiling(dense: dict, got: dict, metric: str, batch: int, pattern: str) -> float | None:
    """The speedup of a step if its other work took dense's time and only its projections sped up, ideally:
    decode (``decode_tok_s``, compiled) streaming the sparse weights' bytes at dense's rate, prefill
    (``prefill_ms``) at the sparse tensor cores' rate, 1 / density. dense step / (dense step - saved)."""
    from cutlass_nm.patterns import Pattern

    if metric == "decode_tok_s":
        step, lin = dense.get((metric, batch, "compiled")), dense.get(("linear_ms", batch, "graph"))
        step = None if step is None else 1e3 * batch / step
        kept = got[("linear_gb", 0, "")] / dense[("linear_gb", 0, "")]
    else:
        step, lin = dense.get((metric, batch, "eager")), dense.get(("linear_ms", batch, "prefill"))
        kept = Pattern.parse(pattern.removesuffix("+fp8")).density
    if step is None or lin is None:
        return None
    return step / (step - (1 - kept) * lin)


def errors(model: nn.Module, twin: nn.Module, device: str) -> dict[str, float]:
    """Relative logit differences on one random prompt of ERR_TOKENS tokens: ``rel_err``, ``model`` against its
    masked dense ``twin`` in the same dtype; ``rel_err_vs_fp32``, against the twin in fp32; and
    ``dense_rel_err_vs_fp32``, the twin's own (the dtype's noise floor on this model). Leaves ``twin`` in fp32."""
    ids = torch.randint(0, model.config.vocab_size, (1, ERR_TOKENS), device=device)

    def logits(m: nn.Module) -> torch.Tensor:
        with torch.no_grad():
            return m(input_ids=ids).logits.double()

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return ((a - b).norm() / b.norm()).item()

    got, same = logits(model), logits(twin)
    ref = logits(twin.float())
    return {"rel_err": rel(got, same), "rel_err_vs_fp32": rel(got, ref), "dense_rel_err_vs_fp32": rel(same, ref)}


def measure(model: nn.Module, args: argparse.Namespace, label: str, modes: list[str], static: bool = True
            ) -> dict[tuple, float]:
    """One model's metrics: {(metric, batch, mode): value}: compiled decode if in ``modes`` (an eager mode: its peak
    memory only; ``eager_pass`` times it), and with ``static`` its memory and projection timings (``eager_pass``
    times prefill)."""
    out: dict[tuple, float] = {}
    if static:
        gb = linear_gb(model)
        out.update({("weight_gb", 0, ""): weight_gb(model), ("linear_gb", 0, ""): sum(gb.values())})
        DETAILS[(label, "linear_gb", 0, "")] = {"by_kind": gb}
    for mode in modes:
        for batch in args.compiled_batches if mode == "compiled" else args.decode_batches:
            if args.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            if mode == "compiled":
                rate = decode_tok_s({label: model}, batch, args.device, True, args.steps, args.decode_reps)
                if not rate:
                    continue
                out[("decode_tok_s", batch, mode)] = rate[label]
                say(f"{label}: decode batch {batch} {mode} {rate[label]:.1f} tok/s")
            elif args.device == "cuda":
                generate_s(model, batch, args.steps[1], args.device, False)
            if args.device == "cuda":
                out[("peak_gb", batch, mode)] = torch.cuda.max_memory_allocated() / 1e9
    if static and args.device == "cuda" and args.prefill_batches and "eager" in modes:
        torch.cuda.reset_peak_memory_stats()  # a long prompt: the prefill's GEMM layouts and the decode's, together
        generate_s(model, 1, args.steps[0], args.device, False, args.prefill_tokens)
        out[("peak_gb", 1, "long_prompt")] = torch.cuda.max_memory_allocated() / 1e9
    if static and args.device == "cuda":
        for batch in sorted({*args.decode_batches, *args.compiled_batches}):
            kinds = linear_ms(model, batch)
            out[("linear_ms", batch, "graph")] = sum(kinds.values())
            DETAILS[(label, "linear_ms", batch, "graph")] = {"by_kind": kinds}
            say(f"{label}: projections at batch {batch}: {out[('linear_ms', batch, 'graph')]:.3f} ms")
        for batch in args.prefill_batches:
            kinds = linear_ms(model, batch, args.prefill_tokens)
            out[("linear_ms", batch, "prefill")] = sum(kinds.values())
            DETAILS[(label, "linear_ms", batch, "prefill")] = {"by_kind": kinds}
            say(f"{label}: projections at prefill {batch}x{args.prefill_tokens}: "
                  f"{out[('linear_ms', batch, 'prefill')]:.2f} ms")
    return out


def rows_for(dtype: str, pattern: str, got: dict, dense: dict, extra: dict) -> list[dict]:
    rows = []
    for (metric, batch, mode), value in got.items():
        base = dense.get((metric, batch, mode))
        if base is None:  # dense failed there
            continue
        better = base / value if metric in ("prefill_ms", "weight_gb", "peak_gb", "linear_gb", "linear_ms") \
            else value / base
        rows.append({"impl": "hf_llama", "pattern": pattern, "dtype": dtype, "metric": metric, "m": batch,
                     "mode": mode, "value": value, "dense_value": base, "speedup_vs_dense": better, **extra})
        rows[-1].update(DETAILS.get((f"{dtype} {pattern}", metric, batch, mode), {}))
        if pattern != "dense":  # dense's, beside (its power and clock, its time per kind of projection)
            rows[-1].update({f"dense_{k}": v for k, v in DETAILS.get((f"{dtype} dense", metric, batch, mode),
                                                                     {}).items()})
        if (metric, mode) in (("decode_tok_s", "compiled"), ("prefill_ms", "eager")) and pattern != "dense" and (
                limit := ceiling(dense, got, metric, batch, pattern)) is not None:
            rows[-1]["ceiling"] = limit
    return rows


def fresh_copy(model: nn.Module, device: str) -> nn.Module:
    """A copy of ``model`` on ``device`` without transformers' compiled forward: ``generate()`` keeps it on the model
    as ``_compiled_call``, bound to the model it was made for, and a deep copy would call that one."""
    from cutlass_nm.hf import COMPILED_CALL

    twin = copy.deepcopy(model)
    for attr in COMPILED_CALL:
        twin.__dict__.pop(attr, None)
    return twin.to(device)


def release(device: str) -> None:
    """Free the last model's memory before the next is measured: compiled graphs hold it (CUDA graphs' pools,
    dynamo's guards), and so may reference cycles."""
    torch._dynamo.reset()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def eager_pass(models: dict[str, nn.Module], got: dict[str, dict], args: argparse.Namespace, label: str) -> None:
    """Prefill and eager decode of every model in turns (see ``prefill_ms`` and ``decode_tok_s``; decode only with
    the eager mode), all on the GPU at once, then back on the CPU."""
    on = {name: held.to(args.device) for name, held in models.items()}
    for batch in args.prefill_batches:
        for name, res in prefill_ms(on, batch, args.prefill_tokens, args.device, args.reps, args.prefill_block,
                                    open_meter() if args.device == "cuda" else None).items():
            got[name][("prefill_ms", batch, "eager")] = res["ms"]
            conditions = DETAILS[(f"{label} {name}", "prefill_ms", batch, "eager")] = {
                k: v for k, v in res.items() if k != "ms"}
            say(f"{label} {name}: prefill {batch}x{args.prefill_tokens} {res['ms']:.1f} ms {conditions}")
    for batch in args.decode_batches if "eager" in args.modes else ():
        for name, rate in decode_tok_s(on, batch, args.device, False, args.steps, args.decode_reps).items():
            got[name][("decode_tok_s", batch, "eager")] = rate
            say(f"{label} {name}: decode batch {batch} eager {rate:.1f} tok/s")
    for model in on.values():
        model.cpu()
    on = None
    release(args.device)


def token_counts(args: argparse.Namespace) -> list[int]:
    """Every count of rows a sparse layer sees in ``measure`` and ``rel_err``: prefills, generate's prompts
    (PROMPT tokens a sequence) and decode steps."""
    return sorted({*(b * args.prefill_tokens for b in args.prefill_batches), *args.decode_batches,
                   *(b * PROMPT for b in args.decode_batches), ERR_TOKENS})


def run(args: argparse.Namespace, save: Callable[[list[dict]], None] = lambda rows: None) -> list[dict]:
    """Every row; ``save`` gets the rows so far after each pass (a long run keeps what it measured). Three passes
    over the models, each kept on the CPU between them: each model's static rows and eager peak memory, then
    prefill and eager decode with the models taking turns, then compiled decode one model at a time (a compiled
    generate() before them slowed the next model's eager decode)."""
    from cutlass_nm import precompile_model
    from cutlass_nm.hf import masked_dense_twin, sparsify_model

    shape = TINY if args.tiny else LLAMA3_8B
    eager_modes = [m for m in args.modes if m != "compiled"]
    rows: list[dict] = []
    for dtype_name in args.dtypes:
        model = build(shape, DTYPES[dtype_name], args.device)
        say(f"{dtype_name} dense: built")
        got = {"dense": measure(model, args, f"{dtype_name} dense", eager_modes)}
        extra: dict[str, dict] = {"dense": {}}
        original = model.cpu()  # off the GPU: its peak memory is the measured model's alone
        models = {"dense": original}
        model = None
        release(args.device)
        for pattern in args.patterns:
            model = fresh_copy(original, args.device)
            sparsify_model(model, pattern.removesuffix("+fp8"), force=args.force, fp8=pattern.endswith("+fp8"))
            summary = model.sparsify_summary
            say(f"{dtype_name} {pattern}: sparsified")
            if args.device == "cuda":  # every kernel the timed calls reach, in parallel, before any is timed
                precompile_model(model, token_counts(args))
                say(f"{dtype_name} {pattern}: kernels compiled")
            err = errors(model, masked_dense_twin(original, model).to(args.device), args.device)
            if args.device == "cuda":
                torch.cuda.empty_cache()  # the fp32 twin is gone
            sparse, kept = len(summary.replaced), len(summary.kept_dense)
            say(f"{dtype_name} {pattern}: {sparse} layers sparse, {kept} kept dense, rel err {err['rel_err']:.2e} "
                  f"(vs fp32 {err['rel_err_vs_fp32']:.2e}; dense vs fp32 {err['dense_rel_err_vs_fp32']:.2e})")
            got[pattern] = measure(model, args, f"{dtype_name} {pattern}", eager_modes)
            extra[pattern] = {**err, "layers_sparse": sparse, "layers_kept_dense": kept}
            models[pattern] = model.cpu()
            model = None
            release(args.device)
        eager_pass(models, got, args, dtype_name)
        save(rows + _rows(dtype_name, got, extra))
        if "compiled" in args.modes:
            for name, held in models.items():
                model = held.to(args.device)
                got[name].update(measure(model, args, f"{dtype_name} {name}", ["compiled"], static=False))
                model.cpu()  # back off the GPU (``original`` still holds dense): the next peak is its model's alone
                models[name] = model = None
                release(args.device)
                save(rows + _rows(dtype_name, got, extra))
        rows += _rows(dtype_name, got, extra)
    return rows


def compile_only(args: argparse.Namespace) -> None:
    """Sparsify each pattern's model as ``run`` does and compile every kernel its timed calls reach, time nothing:
    a first machine call, so that the timed run (a second call on the same machine) finds them in the cache."""
    from cutlass_nm import precompile_model
    from cutlass_nm.hf import sparsify_model

    for dtype_name in args.dtypes:
        original = build(TINY if args.tiny else LLAMA3_8B, DTYPES[dtype_name], args.device).cpu()
        for pattern in args.patterns:
            model = fresh_copy(original, args.device)
            sparsify_model(model, pattern.removesuffix("+fp8"), force=args.force, fp8=pattern.endswith("+fp8"))
            if args.device == "cuda":
                precompile_model(model, token_counts(args))
            say(f"{dtype_name} {pattern}: kernels compiled")
            model = None
            release(args.device)


class NoWork(nn.Module):
    """A linear that does no work: an uninitialized output of its shape (``--host-floor``)."""

    def __init__(self, out_features: int) -> None:
        super().__init__()
        self.out_features = out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.new_empty((*x.shape[:-1], self.out_features))


def host_floor(args: argparse.Namespace) -> list[dict]:
    """Decode of the dense model against the same model whose decoder projections and MLP linears do no work: the
    rate no linear kernel can beat (what is left of each step is the host's and the other layers'), per dtype,
    mode and batch. Eager: both models in turns; compiled (static cache + ``torch.compile``): one at a time, at
    ``--compiled-batches``."""
    rows = []
    for dtype_name in args.dtypes:
        dense = build(TINY if args.tiny else LLAMA3_8B, DTYPES[dtype_name], args.device)
        idle = copy.deepcopy(dense)
        for layer in idle.model.layers:
            for parent in (layer.self_attn, layer.mlp):
                for name, child in list(parent.named_children()):
                    if isinstance(child, nn.Linear):
                        setattr(parent, name, NoWork(child.out_features))
        models = {"dense": dense, "no_linear_work": idle}
        for mode in args.modes:
            compiled = mode == "compiled"
            for batch in args.compiled_batches if compiled else args.decode_batches:
                if compiled:  # a compiled generate() slows what runs next: each model alone, freed after
                    rates = {}
                    for name, model in models.items():
                        rates.update(decode_tok_s({name: model}, batch, args.device, True, args.steps,
                                                  args.decode_reps))
                        release(args.device)
                else:
                    rates = decode_tok_s(models, batch, args.device, False, args.steps, args.decode_reps)
                for name, rate in rates.items():
                    say(f"{dtype_name} {name}: decode batch {batch} {mode} {rate:.1f} tok/s")
                    if "dense" in rates:
                        rows.append({"impl": "hf_llama", "pattern": name, "dtype": dtype_name,
                                     "metric": "decode_tok_s", "m": batch, "mode": mode, "value": rate,
                                     "dense_value": rates["dense"], "speedup_vs_dense": rate / rates["dense"]})
        dense = idle = models = None
        release(args.device)
    return rows


def _rows(dtype_name: str, got: dict[str, dict], extra: dict[str, dict]) -> list[dict]:
    """The rows of one dtype's models (``got``: metrics by model name, dense first)."""
    return [row for name, metrics in got.items() for row in rows_for(dtype_name, name, metrics, got["dense"],
                                                                      extra[name])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", type=lambda s: s.split(","), default=["fp16"], help="fp16,bf16")
    ap.add_argument("--patterns", type=lambda s: s.split(","), default=["2:4", "128:2:8"],
                    help="comma-separated; '2:4+fp8': 2:4 with FP8 weights and activations (Hopper)")
    ap.add_argument("--prefill-batches", type=lambda s: [int(v) for v in s.split(",") if v], default=[1, 4],
                    help="sequences of --prefill-tokens each (empty: no prefill rows)")
    ap.add_argument("--prefill-tokens", type=int, default=2048)
    ap.add_argument("--decode-batches", type=lambda s: [int(v) for v in s.split(",") if v], default=[1, 16])
    ap.add_argument("--compiled-batches", type=lambda s: [int(v) for v in s.split(",") if v], default=None,
                    help="decode batches of the compiled mode (default: --decode-batches; each compiles the model)")
    ap.add_argument("--steps", type=lambda s: tuple(int(v) for v in s.split(",")), default=(16, 80),
                    help="two generation lengths; tokens/s comes from their difference")
    ap.add_argument("--reps", type=int, default=3,
                    help="prefill rounds: every model in turn runs --prefill-block forwards (median)")
    ap.add_argument("--prefill-block", type=int, default=6,
                    help=f"forwards of one model in a row per round, the first {SETTLE} untimed")
    ap.add_argument("--decode-reps", type=int, default=3, help="timed pairs of generation lengths (median rate)")
    ap.add_argument("--no-compile", action="store_true", help="decode eager only (no static cache + torch.compile)")
    ap.add_argument("--modes", type=lambda s: s.split(","), default=None,
                    help="decode modes, eager,compiled (default: both; --no-compile: eager)")
    ap.add_argument("--force", action="store_true", help="sparsify every layer (default: sparse where faster)")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model (checks the script; numbers mean nothing)")
    ap.add_argument("--compile-only", action="store_true",
                    help="sparsify and compile every kernel the run would time, time nothing (a first machine call)")
    ap.add_argument("--host-floor", action="store_true",
                    help="only decode (--modes) of dense against the model whose decoder linears do no work: the most "
                         "any linear kernel can gain in that mode")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, help="write the result JSON here")
    args = ap.parse_args()
    args.modes = args.modes or (["eager"] if args.no_compile else ["eager", "compiled"])
    args.compiled_batches = args.decode_batches if args.compiled_batches is None else args.compiled_batches
    if set(args.modes) - {"eager", "compiled"}:
        raise SystemExit(f"--modes takes eager and/or compiled, got {args.modes}")
    unknown = set(args.dtypes) - set(DTYPES)
    if unknown:
        raise SystemExit(f"unknown dtypes {sorted(unknown)}; choose from {sorted(DTYPES)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here: use --tiny --device cpu --no-compile to check the script")
    if args.compile_only:
        compile_only(args)
        return
    from cutlass_nm.bench.env import environment

    env = environment()

    def save(rows: list[dict]) -> None:
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"environment": env, "rows": rows, "failures": FAILURES}, indent=1))

    save(host_floor(args) if args.host_floor else run(args, save))


if __name__ == "__main__":
    main()

"""Host overhead in eager mode: what one call costs the CPU, against torch's ``F.linear`` in the same run.

    python3 benchmarks/bench_host.py --out results/h100/host_overhead.json            # both parts
    python3 benchmarks/bench_host.py --part calls --families sptc24_sm90,decode24     # a subset

Part ``calls``: every kernel family (forced through ``cutlass_nm.matmul(..., family=...)``; the FP8 families on the
pattern's weight quantized, x fp16) at m in {1, 16, 256} on two LLaMA-7B shapes, plus FP8 128:2:8 and 2:8 weights
by the default route (``impl`` ``matmul_default``: the FP8 decode family at one token, the 16-bit twin above) and
``SparseLinear.forward`` (default routing) against ``nn.Linear.forward``:

* ``host_us``: host time to issue one call while the GPU is held busy (a sleep kernel ahead of the calls, so the
  launch queue never pushes back), median of batches; ``host_us_torch`` is ``F.linear``'s (``nn.Linear``'s),
  timed in alternating batches; ``host_ratio`` is the median of the per-batch ratios;
* ``eager_us``: wall time per call of back-to-back eager calls (events), weights rotated past L2;
* ``median_ms``: the kernel time per call under a CUDA graph (``cutlass_nm.timing``), same rotation.

Part ``decode``: one LLaMA-7B decoder layer's 7 linears (q, k, v, o, gate, up, down) at batch 1 and 8, dense
``nn.Linear`` against ``SparseLinear`` 2:4, 128:2:8 and 2:8: time per step eager (the median of ROUNDS rounds, each
timing dense and every pattern in turn) and replayed as a CUDA graph (``impl`` ``decode_step``); ``host_us``: the
host time to issue one step while the GPU is held busy, against dense's (whether eager steps are host-bound).
``decode_step_stacked``: the same layer with q/k/v and gate/up stacked, as ``sparsify_model`` builds it
(``StackedSparseLinear``, outputs through ``split``: 4 launches), against dense stacked alike (one ``nn.Linear``
each, its output split).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import cutlass_nm
from cutlass_nm.timing import copies_to_rotate, time_rotating

SHAPES = ((4096, 4096), (11008, 4096))  # (n, k): LLaMA-7B attention and MLP-up
TOKENS = (1, 16, 256)
FAMILIES = {  # family -> (the weight pattern it runs here, the token counts it takes)
    "sptc24_sm90": ("2:4", TOKENS), "decode24": ("2:4", (1, 16)), "sptc24_sm80": ("2:4", TOKENS),
    "vnm_sm90": ("128:2:8", TOKENS), "vnm_sm80": ("128:2:8", TOKENS), "nm_decode": ("128:2:8", (1, 16)),
    "nm_decode_simt": ("2:8", (1, 16)), "nm_simt": ("2:8", TOKENS),
    "decode24_fp8": ("2:4", (1,)), "nm_decode_fp8": ("2:8", (1,)),
    "sptc24_fp8_sm90": ("2:4", TOKENS), "vnm_fp8_sm90": ("128:2:8", (16, 256)),
}
# run FP8 weights (cutlass_nm.quantize of the pattern's) with x fp16: as it is at one token, quantized per token above
FP8 = ("decode24_fp8", "nm_decode_fp8", "sptc24_fp8_sm90", "vnm_fp8_sm90")
MODULE_PATTERNS = ("2:4", "128:2:8", "2:8")
FP8_TWIN_PATTERNS = ("128:2:8", "2:8")  # FP8 weights whose default route above one token is the 16-bit twin
LAYER = {"q": (4096, 4096), "k": (4096, 4096), "v": (4096, 4096), "o": (4096, 4096), "gate": (11008, 4096),
         "up": (11008, 4096), "down": (4096, 11008)}  # name -> (out, in)
STACKS = {"qkv": ("q", "k", "v"), "gate_up": ("gate", "up")}  # stacked layer -> the linears it holds, in order
STACKED_SHAPES = {(sum(LAYER[n][0] for n in names), 4096) for names in STACKS.values()}
BATCHES = (1, 8)
ROUNDS = 5  # eager decode steps: rounds of every layer in turn, the median per layer
SLEEP_CYCLES = 60_000_000  # about 30 ms of GPU sleep ahead of each host batch: far longer than the batch issues


def host_us(ours: Callable[[], object], theirs: Callable[[], object], calls: int = 100, batches: int = 15
            ) -> tuple[float, float, float]:
    """Host time of one call of ``ours`` and of ``theirs`` while the GPU is busy (a sleep kernel ahead of each
    batch: pure issue cost, no back-pressure), in alternating batches: the two medians (µs) and the median of
    the per-batch ratios ours / theirs."""
    ours(), theirs()
    torch.cuda.synchronize()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(batches):
        for fn, acc in ((ours, samples[0]), (theirs, samples[1])):
            torch.cuda._sleep(SLEEP_CYCLES)
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            acc.append((time.perf_counter() - t0) / calls * 1e6)
            torch.cuda.synchronize()
    ratio = statistics.median(a / b for a, b in zip(*samples, strict=True))
    return statistics.median(samples[0]), statistics.median(samples[1]), ratio


def eager_us(fn: Callable[[int], object], copies: int, calls: int = 200, batches: int = 7) -> float:
    """Median wall time per call of ``calls`` back-to-back eager calls ``fn(i % copies)`` (CUDA events)."""
    for i in range(copies):
        fn(i)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(batches):
        torch.cuda.synchronize()
        start.record()
        for i in range(calls):
            fn(i % copies)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / calls * 1e3)
    return statistics.median(samples)


def _weights(n: int, k: int, pattern: str, copies: int) -> tuple[list, list[torch.Tensor]]:
    """``copies`` compressed weights of one pattern and their masked dense twins (fp16, on the GPU)."""
    sparse = [cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16), pattern)[0]
              for _ in range(copies)]
    return sparse, [w.to_dense() for w in sparse]


def precompile(families: list[str], part: str) -> None:
    """Compile every kernel the chosen parts run, in parallel on all cores, before anything is timed."""
    from cutlass_nm.build.progress import build_progress
    from cutlass_nm.dispatch import kernels_for
    from cutlass_nm.kernels import precompile as build

    kids: dict = {}
    tokens = sorted(set(TOKENS if part != "decode" else ()) | set(BATCHES if part != "calls" else ()))
    shapes = set(SHAPES) | (set(LAYER.values()) | STACKED_SHAPES if part != "calls" else set())
    for pattern in sorted({FAMILIES[f][0] for f in families} | set(MODULE_PATTERNS)):
        ws = {s: cutlass_nm.prune(torch.randn(*s, device="cuda", dtype=torch.float16), pattern)[0] for s in shapes}
        kids.update(dict.fromkeys(kernels_for([(m, w, torch.float16, False) for w in ws.values() for m in tokens])))
        if pattern in FP8_TWIN_PATTERNS and part != "decode":
            kids.update(dict.fromkeys(kernels_for([(m, cutlass_nm.quantize(ws[s]), torch.float16, False)
                                                   for s in SHAPES for m in TOKENS])))
        for f in families if part != "decode" else ():
            if FAMILIES[f][0] == pattern:
                fp8 = cutlass_nm.quantize if f in FP8 else (lambda w: w)
                problems = [(m, fp8(ws[s]), torch.float16, False) for s in SHAPES for m in FAMILIES[f][1]]
                kids.update(dict.fromkeys(kernels_for(problems, f)))
    with build_progress(len(kids), label="compiling kernels") as progress:
        failed = [r for r in build(list(kids), progress=progress) if isinstance(r, Exception)]
    if failed:
        raise SystemExit(f"{len(failed)} kernel(s) failed to compile: {failed[0]}")


def call_rows(families: list[str]) -> list[dict]:
    """Part ``calls``: one row per (family or module, pattern, m, shape)."""
    rows = []
    for n, k in SHAPES:
        copies = copies_to_rotate(n * k * 2)
        for pattern in sorted({FAMILIES[f][0] for f in families} | set(MODULE_PATTERNS)):
            sparse, dense = _weights(n, k, pattern, copies)
            for m in TOKENS:
                new = _problem_rows(m, pattern, sparse, dense, [f for f in families if FAMILIES[f][0] == pattern
                                                                and m in FAMILIES[f][1]])
                rows += new
                print(f"{n}x{k} {pattern} m={m}: " + ", ".join(
                    f"{r['impl']}/{r['family']} host {r['host_ratio']:.2f}x" for r in new), flush=True)
    return rows


def _problem_rows(m: int, pattern: str, sparse: list, dense: list[torch.Tensor], families: list[str]) -> list[dict]:
    """The rows of one (pattern, m, shape): each family's matmul against ``F.linear``, and ``SparseLinear`` (default
    routing) against ``nn.Linear``."""
    copies, (n, k) = len(dense), dense[0].shape
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(copies)]

    def linear(i: int) -> torch.Tensor:
        return torch.nn.functional.linear(xs[i], dense[i])

    torch_eager = eager_us(linear, copies)
    torch_graph = time_rotating(linear, copies)
    base = {"pattern": pattern, "dtype": "f16", "m": m, "n": n, "k": k, "eager_us_torch": torch_eager,
            "baseline": "cublas", "baseline_median_ms": torch_graph.p50_ms}
    quantized = [cutlass_nm.quantize(w) for w in sparse] if any(f in FP8 for f in families) else []

    def call(family: str) -> Callable[[int], object]:
        ws = quantized if family in FP8 else sparse
        return lambda i: cutlass_nm.matmul(xs[i], ws[i], family=family)

    rows = [_row({**base, "weight_dtype": "e4m3"} if family in FP8 else base, family, "matmul", call(family), linear)
            for family in families]
    if pattern in FP8_TWIN_PATTERNS:  # an FP8 weight by the default route: its FP8 decode family, else its 16-bit twin
        fp8 = [cutlass_nm.quantize(w) for w in sparse]
        row = _row({**base, "weight_dtype": "e4m3"}, None, "matmul_default", lambda i: cutlass_nm.matmul(xs[i], fp8[i]),
                   linear)
        row["family"] = _resolved_family(m, n, k, pattern)
        rows.append(row)
    if pattern in MODULE_PATTERNS:
        mods = [_module(d, pattern) for d in dense]
        ref = [_linear(d) for d in dense]
        with torch.no_grad():
            row = _row({**base, "eager_us_torch": eager_us(lambda i: ref[i](xs[i]), copies)}, None, "SparseLinear",
                       lambda i: mods[i](xs[i]), lambda i: ref[i](xs[i]))
        row["family"] = _resolved_family(m, n, k, pattern)
        rows.append(row)
    return rows


def _row(base: dict, family: str | None, impl: str, fn: Callable[[int], object], torch_fn: Callable[[int], object]
         ) -> dict:
    """Time ``fn(i)`` (input set i) three ways; its host time against ``torch_fn``'s, in alternating batches."""
    copies = copies_to_rotate(base["n"] * base["k"] * 2)
    ours_host, torch_host, ratio = host_us(lambda: fn(0), lambda: torch_fn(0))
    ours_eager = eager_us(fn, copies)
    graph = time_rotating(fn, copies)
    return {**base, "family": family, "impl": impl, "host_us": ours_host, "host_us_torch": torch_host,
            "host_ratio": ratio, "eager_us": ours_eager, "median_ms": graph.p50_ms, "p20_ms": graph.p20_ms,
            "p80_ms": graph.p80_ms, "speedup_eager": base["eager_us_torch"] / ours_eager,
            "speedup_graph": base["baseline_median_ms"] / graph.p50_ms}


def _linear(w: torch.Tensor) -> nn.Linear:
    lin = nn.Linear(w.shape[1], w.shape[0], bias=False, device=w.device, dtype=w.dtype)
    lin.weight.data.copy_(w)
    return lin


def _module(w: torch.Tensor, pattern: str) -> nn.Module:
    return cutlass_nm.SparseLinear.from_linear(_linear(w), pattern, prune=False)


def _resolved_family(m: int, n: int, k: int, pattern: str) -> str | None:
    for r in cutlass_nm.dispatch.resolved():
        if (r["m"], r["n"], r["k"], r["pattern"], r.get("forced", False)) == (m, n, k, pattern, False):
            return r["family"]
    return None


def decode_rows() -> list[dict]:
    """Part ``decode``: a decoder layer's 7 linears, dense against each pattern, eager and as a CUDA graph; then the
    same with q/k/v and gate/up stacked (``decode_step_stacked``)."""
    dense = {name: torch.randn(out, inp, device="cuda", dtype=torch.float16) / inp ** 0.5
             for name, (out, inp) in LAYER.items()}
    layers = {"dense": {name: _linear(w) for name, w in dense.items()}}
    for pattern in MODULE_PATTERNS:
        layers[pattern] = {name: cutlass_nm.SparseLinear.from_linear(_linear(w), pattern)
                           for name, w in dense.items()}
    stacked = {label: _stacked(mods) for label, mods in layers.items()}
    rows = []
    for batch in BATCHES:
        x = torch.randn(batch, 4096, device="cuda", dtype=torch.float16)
        h = torch.randn(batch, 11008, device="cuda", dtype=torch.float16)
        for impl, variant in (("decode_step", layers), ("decode_step_stacked", stacked)):
            steps = {label: _step(mods, x, h) for label, mods in variant.items()}
            with torch.no_grad():
                eager = {label: [] for label in steps}
                for _ in range(ROUNDS):  # dense and each pattern in turn: host drift moves them alike
                    for label, step in steps.items():
                        eager[label].append(eager_us(step, 1, calls=50, batches=3))
                times = {label: (statistics.median(eager[label]), time_rotating(step, 1).p50_ms * 1e3)
                         for label, step in steps.items()}
                hosts = {label: host_us(steps[label], steps["dense"], calls=20, batches=9)
                         for label in MODULE_PATTERNS}
            for pattern in MODULE_PATTERNS:
                se, sg = times["dense"][0] / times[pattern][0], times["dense"][1] / times[pattern][1]
                rows.append({"impl": impl, "family": None, "pattern": pattern, "dtype": "f16", "m": batch,
                             "n": None, "k": None, "eager_us": times[pattern][0], "graph_us": times[pattern][1],
                             "eager_us_torch": times["dense"][0], "graph_us_torch": times["dense"][1],
                             "host_us": hosts[pattern][0], "host_us_torch": hosts[pattern][1],
                             "host_ratio": hosts[pattern][2],
                             "speedup_eager": se, "speedup_graph": sg, "eager_over_graph": se / sg})
                print(f"{impl} batch {batch} {pattern}: eager {se:.2f}x, graph {sg:.2f}x dense", flush=True)
    return rows


def _stacked(mods: dict[str, nn.Module]) -> dict[str, nn.Module]:
    """The layer with each of STACKS as one module (dense: one nn.Linear; sparse: a StackedSparseLinear), o and
    down as they are."""
    from cutlass_nm.nn import StackedSparseLinear

    out = {name: mod for name, mod in mods.items() if not any(name in names for names in STACKS.values())}
    for stack, names in STACKS.items():
        parts = [mods[n] for n in names]
        if isinstance(parts[0], nn.Linear):
            lin = _linear(torch.cat([p.weight for p in parts]))
            lin.sizes = tuple(p.out_features for p in parts)  # type: ignore[assignment]
            out[stack] = lin
        else:
            out[stack] = StackedSparseLinear.stack(parts)
    return out


def _step(mods: dict[str, nn.Module], x: torch.Tensor, h: torch.Tensor) -> Callable[[int], None]:
    """One decode step of the layer's linears (its argument is ignored): down takes the MLP's hidden state h, the
    others x; a stacked layer's outputs are split as a model takes them."""
    def call(mod: nn.Module, x: torch.Tensor) -> object:
        if isinstance(mod, nn.Linear) and hasattr(mod, "sizes"):
            return torch.split_with_sizes(mod(x), mod.sizes, -1)  # as StackedSparseLinear.split does
        return mod.split(x) if hasattr(mod, "sizes") else mod(x)

    def step(_: int = 0) -> None:
        for name, mod in mods.items():
            call(mod, h if name == "down" else x)

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("calls", "decode", "all"), default="all")
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated families for part calls")
    ap.add_argument("--compile-only", action="store_true", help="compile the kernels the parts run, time nothing")
    ap.add_argument("--out", type=Path, help="write the result JSON here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_host.py needs a CUDA GPU")
    families = [f for f in args.families.split(",") if f]
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise SystemExit(f"unknown families {sorted(unknown)}; choose from {sorted(FAMILIES)}")
    from cutlass_nm.bench.env import environment

    result = {"environment": environment(), "rows": []}
    precompile(families, args.part)
    if args.compile_only:
        return
    if args.part in ("calls", "all"):
        result["rows"] += call_rows(families)
    if args.part in ("decode", "all"):
        result["rows"] += decode_rows()
    from cutlass_nm import fastcall

    result["environment"]["cpp_launch"] = fastcall.module() is not None  # CUTLASS_NM_FASTCALL=off: the Python path
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""Host overhead: what an eager (no CUDA graph) call of ``cutlass_nm.matmul`` costs against ``F.linear``.

    python3 benchmarks/bench_host.py --out host.json

Per family (2:4, 128:2:8, 2:8 at vector 32 and 1, fp16 and fp32, forced nm_simt, the fused SwiGLU MLP), m in
{1, 16, 256} and two shapes: ``host_us``, the host time per call of back-to-back calls while the GPU queue is not
full (batches of a few calls, no sync inside a batch; median of batches), ``eager_ms`` (many calls, then a sync),
``graph_ms`` (CUDA-graph replays, the same inputs every call, as eager), each beside torch's on the dense
(pruned) weight, and the eager and graph speedups. Then a LLaMA-7B decoder layer's 7 linears at batch 1 and 8,
eager and as one CUDA graph, dense against 2:4, 128:2:8 and 2:8. The kernels are compiled up front, in parallel.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

SHAPES = ((4096, 4096), (11008, 4096))  # (n, k)
MS = (1, 16, 256)
# (label, pattern, dtype, vector, forced family): matmul picks the family unless one is forced
CASES = (("2:4", "2:4", "f16", 0, None), ("128:2:8", "128:2:8", "f16", 0, None), ("2:8", "2:8", "f16", 32, None),
         ("2:8 v1", "2:8", "f16", 1, None), ("2:8 simt", "2:8", "f16", 32, "nm_simt"),
         ("2:8 fp32", "2:8", "f32", 32, None))
LLAMA = {"q": (4096, 4096), "k": (4096, 4096), "v": (4096, 4096), "o": (4096, 4096), "gate": (11008, 4096),
         "up": (11008, 4096), "down": (4096, 11008)}
STEP_PATTERNS = (("2:4", 0), ("128:2:8", 0), ("2:8", 32))


def host_us(fn: Callable[[], object], calls: int, batches: int) -> float:
    """Host time per call: batches of ``calls`` back-to-back calls (the GPU queue never fills), synced between."""
    import torch

    samples = []
    for _ in range(batches):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(samples)


def eager_ms(fn: Callable[[], object], calls: int, batches: int) -> float:
    """End-to-end eager time per call: ``calls`` calls and a sync, median of batches."""
    import torch

    samples = []
    for _ in range(batches):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / calls * 1e3)
    return statistics.median(samples)


def graph_ms(fn: Callable[[], object]) -> float | None:
    """Per-call time under CUDA-graph replay (None where capture failed and events timed it instead)."""
    from cutlass_nm.bench.timing import time_rotating

    t = time_rotating(lambda i: fn(), 1, reps=50, warmup_ms=50.0)
    return t.p50_ms if t.method == "graph" else None


def measure(fn: Callable[[], object], args) -> dict:
    fn()
    return {"host_us": host_us(fn, args.calls, args.batches), "eager_ms": eager_ms(fn, args.eager_calls, args.batches),
            "graph_ms": graph_ms(fn)}


@contextmanager
def collecting_kernels(kids: list):
    """Within: matmul and kernel_for resolve as usual but load nothing; each kernel id lands in ``kids`` and the
    launch is skipped. The resolutions are forgotten on exit."""
    from cutlass_nm import dispatch

    saved, real = dict(dispatch._RESOLVED), dispatch.get_kernel

    def collect(kid):
        kids.append(kid)
        return lambda *a, **kw: None

    dispatch.get_kernel = collect
    dispatch._RESOLVED.clear()  # every call resolves afresh, so that its kernels are named
    try:
        yield
    finally:
        dispatch.get_kernel = real
        dispatch._RESOLVED.clear()
        dispatch._RESOLVED.update(saved)


def compile_all(calls: list[Callable[[], object]], workers: int | None) -> None:
    """Resolve every call's kernels (no launch), then compile them and their helpers in parallel."""
    from cutlass_nm.families import get_family
    from cutlass_nm.kernels import precompile

    kids: list = []
    with collecting_kernels(kids):
        for call in calls:
            call()
    kids += [h for kid in list(kids) for h in get_family(kid[0]).helpers(kid[1], kid[2])]
    unique = list(dict.fromkeys(kids))
    t0 = time.time()
    failed = [r for r in precompile(unique, workers=workers) if isinstance(r, Exception)]
    print(f"compiled {len(unique)} kernels in {time.time() - t0:.0f} s ({len(failed)} failed)", flush=True)
    for f in failed:
        print(f"  {f}", flush=True)


def family_ran(call: Callable[[], object]) -> str:
    kids: list = []
    with collecting_kernels(kids):
        call()
    return "+".join(dict.fromkeys(k[0] for k in kids))


def make_weight(n: int, k: int, pattern: str, dtype, vector: int):
    import torch

    import cutlass_nm

    dense = torch.randn(n, k, device="cuda", dtype=dtype)
    w = cutlass_nm.prune(dense, pattern, vector=vector or 32)[0]
    return w, w.to_dense()


def op_cases(args) -> list[tuple[dict, Callable, Callable]]:
    """(row fields, sparse call, dense call) per family case, shape and m."""
    import torch
    import torch.nn.functional as F

    import cutlass_nm
    from cutlass_nm.formats.glu import fuse_glu, split_glu
    from cutlass_nm.gated_mlp import gated_mlp

    dtypes = {"f16": torch.float16, "f32": torch.float32}
    out = []
    for label, pattern, dt, vector, family in CASES:
        for n, k in SHAPES:
            w, wd = make_weight(n, k, pattern, dtypes[dt], vector)
            for m in MS:
                x = torch.randn(m, k, device="cuda", dtype=dtypes[dt])
                fields = {"case": label, "pattern": pattern, "dtype": dt, "vector": vector or None, "m": m, "n": n,
                          "k": k, "forced": family}
                out.append((fields, lambda x=x, w=w, f=family: cutlass_nm.matmul(x, w, family=f),
                            lambda x=x, wd=wd: F.linear(x, wd)))
    hidden, k = LLAMA["gate"]
    gate_up = fuse_glu(torch.randn(hidden, k, device="cuda", dtype=torch.float16),
                       torch.randn(hidden, k, device="cuda", dtype=torch.float16), "128:2:8")
    down, down_d = make_weight(k, hidden, "128:2:8", torch.float16, 0)
    g_d, u_d = (t.contiguous() for t in split_glu(gate_up))

    def dense_mlp(x, g=g_d, u=u_d, d=down_d):
        return F.linear(F.silu(F.linear(x, g)) * F.linear(x, u), d)

    for m in MS:
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        fields = {"case": "gated_mlp", "pattern": "128:2:8", "dtype": "f16", "vector": None, "m": m, "n": hidden,
                  "k": k, "forced": None}
        out.append((fields, lambda x=x: gated_mlp(x, gate_up, down), lambda x=x: dense_mlp(x)))
    return out


def step_cases(batches: tuple[int, ...]) -> list[tuple[dict, Callable, Callable]]:
    """A LLaMA-7B decoder layer's 7 linears in order, per batch size and pattern: (fields, sparse step, dense step)."""
    import torch
    import torch.nn.functional as F

    import cutlass_nm

    dense = {name: torch.randn(n, k, device="cuda", dtype=torch.float16) for name, (n, k) in LLAMA.items()}
    out = []
    for pattern, vector in STEP_PATTERNS:
        ws = {name: cutlass_nm.prune(d, pattern, vector=vector or 32)[0] for name, d in dense.items()}
        wd = {name: w.to_dense() for name, w in ws.items()}
        for b in batches:
            xs = {name: torch.randn(b, k, device="cuda", dtype=torch.float16) for name, (n, k) in LLAMA.items()}

            def sparse(ws=ws, xs=xs):
                for name, w in ws.items():
                    cutlass_nm.matmul(xs[name], w)

            def dense_step(wd=wd, xs=xs):
                for name, w in wd.items():
                    F.linear(xs[name], w)

            fields = {"case": "llama7b_decode_step", "pattern": pattern, "dtype": "f16", "vector": vector or None,
                      "m": b, "n": None, "k": None, "forced": None}
            out.append((fields, sparse, dense_step))
    return out


def row(fields: dict, family: str, sparse: dict, dense: dict) -> dict:
    def ratio(a, b):
        return a / b if a and b else None

    return {**fields, "family": family, "impl": "cutlass_nm.matmul", "median_ms": sparse["graph_ms"],
            "host_us": sparse["host_us"], "host_us_torch": dense["host_us"], "eager_ms": sparse["eager_ms"],
            "eager_ms_torch": dense["eager_ms"], "graph_ms": sparse["graph_ms"], "graph_ms_torch": dense["graph_ms"],
            "host_ratio": ratio(sparse["host_us"], dense["host_us"]),
            "speedup_eager_vs_dense": ratio(dense["eager_ms"], sparse["eager_ms"]),
            "speedup_graph_vs_dense": ratio(dense["graph_ms"], sparse["graph_ms"])}


def table(rows: list[dict]) -> str:
    def f(v, fmt):
        return "—" if v is None else format(v, fmt)

    lines = ["| case | family | m | n x k | host µs | torch µs | host ratio | eager ms | eager speedup | "
             "graph speedup |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['case']} {r['pattern']} | error | {r['m']} | | {r['error'][:60]} | | | | | |")
            continue
        shape = f"{r['n']} x {r['k']}" if r["n"] else "7 linears"
        lines.append(f"| {r['case']} {r['pattern']} {r['dtype']} | {r['family']} | {r['m']} | {shape} | "
                     f"{f(r['host_us'], '.1f')} | {f(r['host_us_torch'], '.1f')} | {f(r['host_ratio'], '.2f')} | "
                     f"{f(r['eager_ms'], '.4f')} | {f(r['speedup_eager_vs_dense'], '.2f')}x | "
                     f"{f(r['speedup_graph_vs_dense'], '.2f')}x |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("host.json"), help="result JSON (default host.json)")
    ap.add_argument("--calls", type=int, default=20, help="calls per host-time batch (default 20)")
    ap.add_argument("--eager-calls", type=int, default=100, help="calls per eager-time batch (default 100)")
    ap.add_argument("--batches", type=int, default=11, help="batches per median (default 11)")
    ap.add_argument("--workers", type=int, default=None, help="parallel compile jobs (default: the build default)")
    ap.add_argument("--no-step", action="store_true", help="skip the LLaMA-7B decode step")
    args = ap.parse_args()

    import torch

    from cutlass_nm.bench.env import environment

    if not torch.cuda.is_available():
        raise SystemExit("bench_host needs a CUDA GPU")
    t_start = time.time()
    cases = op_cases(args) + ([] if args.no_step else step_cases((1, 8)))
    compile_all([sparse for _, sparse, _ in cases], args.workers)
    rows = []
    for fields, sparse, dense in cases:
        try:
            family = family_ran(sparse)
            rows.append(row(fields, family, measure(sparse, args), measure(dense, args)))
        except Exception as e:  # one case's failure is its row, not the run's end
            torch.cuda.synchronize()
            rows.append({**fields, "impl": "cutlass_nm.matmul", "error": f"{type(e).__name__}: {e}"})
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    env = {**environment(), "command": "benchmarks/bench_host.py", "seconds": round(time.time() - t_start)}
    args.out.write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    print(f"\n{env.get('gpu')}: host ratio = cutlass_nm host µs / torch F.linear host µs (<= 1: the goal)\n")
    print(table(rows))
    print(f"\nwrote {args.out} ({time.time() - t_start:.0f} s)")


if __name__ == "__main__":
    main()

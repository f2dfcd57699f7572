"""The GPU side of ``cutlass-nm bench``: compile, time the baselines and every planned case, derive metrics.

Timing is ``bench.timing.time_rotating`` (CUDA-graph replays over input sets rotated past L2; median,
p20, p80). Each row's figures are ratios to baselines timed in this same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import threading
import time
from typing import Any

import torch

from ..families import KernelTypes, get_family
from ..formats import prune_24
from ..formats.nm import compress_nm, mask_nm
from ..kernels import get_kernel, precompile
from ..patterns import Pattern
from ..tune.perfmodel import BANDWIDTH, RATES, ideal_ms, traffic_bytes
from .env import environment
from .shapes import Shape
from .suite import CSLT_MODE, ENGINES, Case, clone_weight, cusparselt_rows
from .timing import copies_to_rotate, time_rotating

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
NM_VECTOR = 32  # the N:M format's default index-sharing vector (formats/nm.py)


def make_weight(w: torch.Tensor, pattern: str, kind: str) -> Any:
    """Magnitude-prune ``w`` to ``pattern`` in the format of ``kind`` (2:4 as N:M too, for the CUDA-core kinds)."""
    import cutlass_nm

    if kind == "nm":
        p = Pattern.parse(pattern)
        return compress_nm(w * mask_nm(w, p, NM_VECTOR), p, NM_VECTOR)
    return cutlass_nm.prune(w, pattern)[0]


def weight_bytes(w: Any) -> int:
    """Bytes of a compressed weight as stored (values + indices / metadata)."""
    tensors = (getattr(w, f.name) for f in dataclasses.fields(w))
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def metrics(m: int, n: int, k: int, ms: float, density: float, wbytes: float, engine: str, elem: int = 2,
            out: int = 2) -> dict:
    """Throughput and % of the perf model's ideal for one timed row."""
    flops = 2.0 * m * n * k
    ideal = ideal_ms(m, n, k, density, wbytes, engine, elem, out)
    return {"tflops": flops / ms / 1e9, "tflops_effective": flops * density / ms / 1e9,
            "gbps": traffic_bytes(m, n, k, wbytes, elem, out) / ms / 1e6, "weight_bytes": int(wbytes),
            "ideal_ms": ideal, "pct_of_ideal": 100.0 * ideal / ms}


def run_suite(shapes: list[Shape], cases: list[Case], skipped: list[dict], types: KernelTypes,
              args: argparse.Namespace) -> dict:
    """Compile (in parallel, while cuSPARSELt runs in its child), then time shape by shape."""
    t_start = time.time()
    reps = args.reps or (30 if args.quick else 50)
    warmup = 100.0 if args.quick else 200.0
    cslt: dict = {}
    worker = None
    if not args.no_cusparselt:
        mnks = [s.mnk for s in shapes]
        # past half the budget, cuSPARSELt skips its remaining shapes: the families' timing waits for it
        deadline = t_start + args.budget_s / 2 if args.budget_s else float("inf")
        worker = threading.Thread(
            target=lambda: cslt.update(cusparselt_rows(mnks, args.dtype, reps, deadline=deadline)))
        worker.start()
    failed = _compile(cases, types, args.jobs)
    t_compiled = time.time()
    print(f"compiled in {t_compiled - t_start:.0f} s ({len(failed)} failed)", flush=True)
    if worker is not None:
        worker.join()  # the GPU is cuSPARSELt's until its child is done
    print(f"cuSPARSELt done at {time.time() - t_start:.0f} s", flush=True)

    env = environment()
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # SGEMM baseline: true fp32 on CUDA cores
    rows: list[dict] = []
    try:
        for s in shapes:
            if args.budget_s and time.time() - t_start > args.budget_s:
                skipped.append({"m": s.m, "n": s.n, "k": s.k, "family": "*", "reason": "--budget-s reached"})
                continue
            mine = [c for c in cases if c.shape == s]
            shape_rows = bench_shape(s, mine, types, reps, warmup, failed, cslt.get(s.mnk), not args.no_sgemm)
            derive(shape_rows)
            rows += shape_rows
            print(summary(s, shape_rows), flush=True)
            torch.cuda.empty_cache()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    seconds = time.time() - t_start
    print(f"suite done in {seconds:.0f} s", flush=True)
    return {"environment": env,
            "suite": {"shapes": len(shapes), "cases": len(cases), "reps": reps, "dtype": args.dtype,
                      "compile_s": round(t_compiled - t_start, 1), "total_s": round(seconds, 1),
                      "families": sorted({c.family for c in cases})},
            "model": {"rates_flops": RATES, "bandwidth_Bps": BANDWIDTH},
            "skipped": skipped, "rows": rows}


def _compile(cases: list[Case], types: KernelTypes, jobs: int | None) -> dict:
    """Build every kernel the cases need, in parallel; returns kernel id -> error for those that failed."""
    kids = sorted({(c.family, c.config, types) for c in cases}, key=str)
    failed: dict = {}
    ok = []
    for kid in kids:  # a family whose source() refuses the config fails alone
        try:
            get_family(kid[0]).source(kid[1], kid[2])
            ok.append(kid)
        except Exception as exc:
            failed[kid] = exc
    for kid, res in zip(ok, precompile(ok, workers=jobs), strict=True):
        if isinstance(res, Exception):
            failed[kid] = res
            print("  build failed:", kid[0], kid[1], str(res)[:300], flush=True)
    print(f"{len(kids)} kernels", flush=True)
    return failed


def bench_shape(s: Shape, cases: list[Case], types: KernelTypes, reps: int, warmup: float, failed: dict,
                cslt: dict | None, sgemm: bool) -> list[dict]:
    """Rows for one shape: cuBLAS, SGEMM, cuSPARSELt (timed earlier in its child), then every case."""
    m, n, k = s.mnk
    dtype = DTYPES[types.dtype]
    g = torch.Generator(device="cuda").manual_seed(0)
    w_full = torch.randn(n, k, device="cuda", dtype=dtype, generator=g)
    dense = prune_24(w_full)
    pool = copies_to_rotate(m * k * 2 + n * k // 4)  # enough x copies for the smallest weight
    xs = [torch.randn(m, k, device="cuda", dtype=dtype, generator=g) for _ in range(pool)]
    base = {"m": m, "n": n, "k": k, "name": s.name, "dtype": types.dtype}
    rows: list[dict] = []

    def record(fields: dict, fn, copies: int, ref_w: torch.Tensor, met) -> None:
        row = {**base, **fields}
        try:
            y = fn(0)
            torch.cuda.synchronize()
            ref = xs[0].double() @ ref_w.double().T
            err = ((y.double() - ref).norm() / ref.norm()).item()
            # the shape's first row warms the clocks up; the rest need a short warm-up each
            t = time_rotating(fn, copies, reps=reps, warmup_ms=warmup if not rows else min(warmup, 50.0))
        except Exception as exc:  # a failing implementation is a row, not the end of the run
            rows.append({**row, "error": f"{type(exc).__name__}: {exc}"[:300]})
            return
        rows.append({**row, "median_ms": t.p50_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms, "reps": t.reps,
                     "timing": t.method, "rel_err": err, **met(t.p50_ms)})

    dense_fields = {"family": None, "pattern": None, "sparsity": 0.0, "tuned": False, "config": None}
    copies = min(pool, copies_to_rotate((m * k + n * k) * 2))
    ws = [dense] + [dense.clone() for _ in range(copies - 1)]
    record({**dense_fields, "impl": "cublas", "engine": "tensor"}, lambda i: torch.mm(xs[i], ws[i].T), copies, dense,
           lambda ms: metrics(m, n, k, ms, 1.0, n * k * 2, "tensor"))
    if sgemm:
        copies = min(pool, copies_to_rotate((m * k + n * k) * 4))
        xs32 = [x.float() for x in xs[:copies]]
        ws32 = [dense.float() for _ in range(copies)]
        record({**dense_fields, "impl": "cublas_sgemm", "engine": "simt", "dtype": "f32"},
               lambda i: torch.mm(xs32[i], ws32[i].T), copies, dense,
               lambda ms: metrics(m, n, k, ms, 1.0, n * k * 4, "simt", 4, 4))
    if cslt is not None:
        row = {**base, **dense_fields, "impl": CSLT_MODE, "pattern": "2:4", "sparsity": 0.5, "engine": "tensor",
               **cslt}
        if "median_ms" in cslt:
            row.update(metrics(m, n, k, cslt["median_ms"], 0.5, n * k * (1 + 1 / 8), "tensor"))
        rows.append(row)

    weights: dict[tuple[str, str], Any] = {}
    for c in cases:
        fields = {"family": c.family, "impl": c.impl, "pattern": c.pattern,
                  "sparsity": Pattern.parse(c.pattern).sparsity, "engine": ENGINES[c.kind], "tuned": c.tuned,
                  "config": c.config.to_record()}
        kid = (c.family, c.config, types)
        if kid in failed:
            rows.append({**base, **fields, "error": f"build failed: {failed[kid]}"[:300]})
            continue
        try:
            w0 = weights.get((c.kind, c.pattern))
            if w0 is None:
                w0 = weights[(c.kind, c.pattern)] = make_weight(w_full, c.pattern, c.kind)
            wb = weight_bytes(w0)
            copies = min(pool, copies_to_rotate(m * k * 2 + wb))
            cw = [w0] + [clone_weight(w0) for _ in range(copies - 1)]
            kern = get_kernel(kid)
        except Exception as exc:
            rows.append({**base, **fields, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        y = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)

        def run(i: int, kern=kern, cw=cw, y=y) -> torch.Tensor:
            kern(xs[i], cw[i], None, y)
            return y

        density = 1.0 - fields["sparsity"]
        record(fields, run, copies, w0.to_dense(),
               lambda ms, wb=wb, density=density, e=fields["engine"]: metrics(m, n, k, ms, density, wb, e))
    return rows


def derive(rows: list[dict]) -> None:
    """Each timed row's speedup over each baseline of its shape (None where that baseline failed)."""
    t = {r["impl"]: r["median_ms"] for r in rows if r["impl"] in ("cublas", "cublas_sgemm", CSLT_MODE)
         and "median_ms" in r}
    for r in rows:
        if "median_ms" not in r:
            continue
        for key, impl in (("speedup_vs_cublas", "cublas"), ("speedup_vs_sgemm", "cublas_sgemm"),
                          ("speedup_vs_cusparselt", CSLT_MODE)):
            r[key] = t[impl] / r["median_ms"] if impl in t else None
        r["speedup_vs_cusparselt_best"] = r["speedup_vs_cusparselt"]  # bench_sptc24's name; one mode timed here


def summary(s: Shape, rows: list[dict]) -> str:
    cb = next((r["median_ms"] for r in rows if r["impl"] == "cublas" and "median_ms" in r), None)
    line = f"{s.m}x{s.n}x{s.k} ({s.name}): cuBLAS {cb:.4f} ms" if cb else f"{s.m}x{s.n}x{s.k}: cuBLAS failed"
    for r in rows:
        if r["impl"] == "cublas":
            continue
        tag = r["impl"] + (f"[{r['pattern']}]" if r.get("family") else "")
        line += f" | {tag} " + (f"{r['speedup_vs_cublas']:.2f}x" if r.get("speedup_vs_cublas") else "—")
    return line

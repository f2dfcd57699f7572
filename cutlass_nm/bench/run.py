"""The GPU side of ``cutlass-nm bench``: compile, time the baselines and every planned case, derive metrics.

Timing is ``cutlass_nm.timing.time_rotating`` (CUDA-graph replays over input sets rotated past L2; median,
p20, p80). Each row's figures are ratios to baselines timed in this same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from ..families import KernelTypes, get_family
from ..formats import prune_24
from ..formats.nm import compress_nm, mask_nm
from ..formats.vnm import compress_vnm
from ..kernels import get_kernel, precompile
from ..patterns import Pattern
from ..timing import copies_to_rotate, time_rotating
from .cases import CSLT_MODE, ENGINES, Case, clone_weight
from .cusparselt import cusparselt_rows
from .env import environment
from .roofline import BANDWIDTH, RATES, ideal_ms, traffic_bytes
from .shapes import Shape

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
NM_VECTOR = 32  # the N:M format's default index-sharing vector (formats/nm.py)


def make_weight(w: torch.Tensor, pattern: str, kind: str, vector: int = NM_VECTOR) -> Any:
    """Magnitude-prune ``w`` to ``pattern`` in the format of ``kind`` (2:4 as N:M too, for the CUDA-core kinds;
    N:M positions shared by ``vector`` rows)."""
    import cutlass_nm

    if kind == "nm":
        p = Pattern.parse(pattern)
        return compress_nm(w * mask_nm(w, p, vector), p, vector)
    if kind == "vnm":  # the fast column choice: timing does not depend on which columns are kept
        return compress_vnm(w, pattern, prune=True, exact=False)
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
              args: argparse.Namespace, checkpoint: Callable[[dict], None] | None = None) -> dict:
    """Compile (in parallel, while cuSPARSELt runs in its child), then time: the dense baselines in one worker
    process, then each family in its own, so that a family whose kernel faults (a CUDA error poisons the
    context) costs only its own rows. ``checkpoint`` gets the result so far after each worker group."""
    t_start = time.time()
    reps = args.reps or (30 if args.quick else 50)
    end = t_start + args.budget_s if args.budget_s else float("inf")
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
    spec = {"dtype": args.dtype, "reps": reps, "warmup": 100.0 if args.quick else 200.0, "sgemm": not args.no_sgemm}
    groups: list[tuple[str, list[Case]]] = [("baselines", [])]
    groups += [(f, [c for c in cases if c.family == f]) for f in dict.fromkeys(c.family for c in cases)]
    weights = [2 * len(shapes) if g == "baselines" else len(cs) for g, cs in groups]
    by_group: dict[str, list[dict]] = {}

    def result(partial: bool) -> dict:
        rows = assemble(shapes, by_group, cslt)
        seconds = time.time() - t_start
        return {"environment": env,
                "suite": {"shapes": len(shapes), "cases": len(cases), "reps": reps, "dtype": args.dtype,
                          "compile_s": round(t_compiled - t_start, 1), "total_s": round(seconds, 1),
                          "families": sorted({c.family for c in cases}), "partial": partial},
                "model": {"rates_flops": RATES, "bandwidth_Bps": BANDWIDTH}, "skipped": skipped, "rows": rows}

    timed = shapes
    for i, (group, gcases) in enumerate(groups):
        now = time.time()
        share = weights[i] / max(1, sum(weights[i:]))
        deadline = now + (end - now) * share if end != float("inf") else float("inf")
        # families run only where the baselines were timed (the budget may have cut the baselines short)
        gcases = [c for c in gcases if c.shape in timed]
        runnable = [c for c in gcases if (c.family, c.config, types) not in failed]
        rows = [_row(c, dtype=args.dtype, error=f"build failed: {failed[(c.family, c.config, types)]}"[:300])
                for c in gcases if (c.family, c.config, types) in failed]
        rows += run_group(group, shapes, runnable, {**spec, "baselines": group == "baselines"}, deadline, skipped)
        by_group[group] = rows
        if group == "baselines":
            timed = [s for s in shapes if any((r["m"], r["n"], r["k"]) == s.mnk for r in rows)]
        print(f"{group}: {sum('median_ms' in r for r in rows)} rows timed, {sum('error' in r for r in rows)} errors "
              f"at {time.time() - t_start:.0f} s", flush=True)
        if checkpoint:
            checkpoint(result(partial=True))
    out = result(partial=False)
    for s in shapes:
        mine = [r for r in out["rows"] if (r["m"], r["n"], r["k"]) == s.mnk]
        if mine:
            print(summary(s, mine), flush=True)
    print(f"suite done in {time.time() - t_start:.0f} s", flush=True)
    return out


def _row(c: Case, **extra) -> dict:
    """The identifying fields of a case's row."""
    return {"m": c.shape.m, "n": c.shape.n, "k": c.shape.k, "name": c.shape.name, "family": c.family,
            "impl": c.impl, "pattern": c.pattern, "sparsity": Pattern.parse(c.pattern).sparsity,
            "engine": ENGINES[c.kind], "tuned": c.tuned, "config_source": c.source, "config": c.config.to_record(),
            **extra}


def assemble(shapes: list[Shape], by_group: dict[str, list[dict]], cslt: dict) -> list[dict]:
    """Rows shape by shape: cuBLAS, SGEMM, cuSPARSELt, then the families; speedups derived per shape."""
    rows: list[dict] = []
    for s in shapes:
        mine = [r for r in by_group.get("baselines", []) if (r["m"], r["n"], r["k"]) == s.mnk]
        if not mine:
            continue  # its baselines were not timed (budget): the shape is left out
        res = cslt.get(s.mnk)
        if res is not None:
            row = {"m": s.m, "n": s.n, "k": s.k, "name": s.name, "dtype": mine[0]["dtype"], "family": None,
                   "impl": CSLT_MODE, "pattern": "2:4", "sparsity": 0.5, "engine": "tensor", "tuned": False,
                   "config_source": None, "config": None, **res}
            if "median_ms" in res:
                row.update(metrics(s.m, s.n, s.k, res["median_ms"], 0.5, s.n * s.k * (1 + 1 / 8), "tensor"))
            mine.append(row)
        for group, grows in by_group.items():
            if group != "baselines":
                mine += [r for r in grows if (r["m"], r["n"], r["k"]) == s.mnk]
        derive(mine)
        rows += mine
    return rows


def run_group(group: str, shapes: list[Shape], cases: list[Case], spec: dict, deadline: float,
              skipped: list[dict], max_faults: int = 2) -> list[dict]:
    """Time one group's cases in worker processes, starting a new one after a fault (the faulting case's
    row carries the error; the rest of that shape's cases are marked) until ``max_faults``."""
    if not spec["baselines"]:
        shapes = [s for s in shapes if any(c.shape == s for c in cases)]
    rows: list[dict] = []
    todo, faults = list(shapes), 0
    if time.time() > deadline:  # the budget is spent: start no worker at all
        skipped += [{"m": s.m, "n": s.n, "k": s.k, "family": group, "reason": "--budget-s reached"} for s in todo]
        return rows
    while todo:
        mnks = {s.mnk for s in todo}
        job = {**spec, "deadline": min(deadline, 1e12), "shapes": [[s.m, s.n, s.k, s.name] for s in todo],
               "cases": [_spec_case(c) for c in cases if c.shape.mnk in mnks]}
        lines, rc, err_tail = _worker(job, deadline)
        done: set[tuple] = set()
        for kind, payload in lines:
            if kind == "ROW":
                rows.append(payload)
            elif kind == "DONE":
                done.add(tuple(payload))
            elif kind == "SKIP":
                done.add(tuple(payload))
                skipped.append({"m": payload[0], "n": payload[1], "k": payload[2], "family": group,
                                "reason": "--budget-s reached"})
        todo = [s for s in todo if s.mnk not in done]
        if not todo:
            break
        faults += 1
        bad, todo = todo[0], todo[1:]
        why = f"worker exited ({rc}) during this shape: {err_tail}"[:300]
        have = {(r["impl"], r.get("pattern")) for r in rows if (r["m"], r["n"], r["k"]) == bad.mnk}
        expected = ([("cublas", None), ("cublas_sgemm", None)] if spec["baselines"] else
                    [(c.impl, c.pattern) for c in cases if c.shape == bad])
        for impl, pattern in expected:
            if (impl, pattern) not in have:
                case = next((c for c in cases if c.shape == bad and c.impl == impl and c.pattern == pattern), None)
                rows.append(_row(case, dtype=spec["dtype"], error=why) if case else
                            {"m": bad.m, "n": bad.n, "k": bad.k, "name": bad.name, "dtype": spec["dtype"],
                             "impl": impl, "family": None, "pattern": None, "error": why})
        print(f"  {group}: worker fault at {bad.m}x{bad.n}x{bad.k}: {err_tail[:200]}", flush=True)
        if faults >= max_faults:
            skipped += [{"m": s.m, "n": s.n, "k": s.k, "family": group,
                         "reason": f"not run: its worker faulted {faults} times"} for s in todo]
            break
    return rows


def _spec_case(c: Case) -> list:
    return [c.shape.m, c.shape.n, c.shape.k, c.shape.name, c.family, c.kind, c.pattern, c.config.to_record(),
            c.source]


def _case_of(v: list) -> Case:
    m, n, k, name, family, kind, pattern, record, source = v
    return Case(Shape(m, n, k, name), family, kind, pattern, get_family(family).Config.from_record(record), source)


def _worker(job: dict, deadline: float, grace_s: float = 90.0) -> tuple[list[tuple[str, Any]], int, str]:
    """Run one worker process on ``job``; kill it if it outlives the deadline by ``grace_s`` (a hang)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "cutlass_nm.bench.run", "--worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        timer = None
        if deadline != float("inf"):
            timer = threading.Timer(max(0.0, deadline - time.time()) + grace_s, proc.kill)
            timer.start()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(job))
        proc.stdin.close()
        lines = []
        for line in proc.stdout:
            kind, _, payload = line.rstrip("\n").partition(" ")
            if kind in ("ROW", "DONE", "SKIP"):
                lines.append((kind, json.loads(payload)))
        rc = proc.wait()
        if timer:
            timer.cancel()
        err.seek(0)
        tail = [ln for ln in err.read().strip().splitlines() if ln.strip()]
    return lines, rc, (tail[-1] if tail else ("killed: past the deadline" if rc < 0 else f"exit status {rc}"))


def worker_main(job: dict) -> int:
    """A worker process: time the job's shapes in order, one ``ROW <json>`` line per row, ``DONE [m, n, k]``
    after each shape (``SKIP`` past the deadline); exit at once if the CUDA context is broken."""
    types = KernelTypes(job["dtype"], job["dtype"], False)
    cases = [_case_of(v) for v in job["cases"]]
    torch.backends.cuda.matmul.allow_tf32 = False  # SGEMM baseline: true fp32 on CUDA cores

    def emit(row: dict) -> None:
        print("ROW " + json.dumps(row), flush=True)
        if "error" in row and not _cuda_ok():
            sys.stdout.flush()
            os._exit(3)  # a sticky CUDA error: the parent starts a new worker for the next shape

    for m, n, k, name in job["shapes"]:
        s = Shape(m, n, k, name)
        if time.time() > job["deadline"]:
            print("SKIP " + json.dumps([m, n, k]), flush=True)
            continue
        bench_shape(s, [c for c in cases if c.shape.mnk == s.mnk], types, job["reps"], job["warmup"], job["sgemm"],
                    baselines=job["baselines"], emit=emit)
        print("DONE " + json.dumps([m, n, k]), flush=True)
        torch.cuda.empty_cache()
    return 0


def _cuda_ok() -> bool:
    try:
        (torch.ones(1, device="cuda") + 1).item()
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


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


def bench_shape(s: Shape, cases: list[Case], types: KernelTypes, reps: int, warmup: float, sgemm: bool,
                baselines: bool = True, emit: Callable[[dict], None] | None = None) -> list[dict]:
    """Rows for one shape: cuBLAS and SGEMM (if ``baselines``), then every case (kernels already built); each
    row also goes to ``emit`` as soon as it is measured."""
    m, n, k = s.mnk
    dtype = DTYPES[types.dtype]
    g = torch.Generator(device="cuda").manual_seed(0)
    w_full = torch.randn(n, k, device="cuda", dtype=dtype, generator=g)
    dense = prune_24(w_full)
    pool = copies_to_rotate(m * k * 2 + n * k // 4)  # enough x copies for the smallest weight
    xs = [torch.randn(m, k, device="cuda", dtype=dtype, generator=g) for _ in range(pool)]
    base = {"m": m, "n": n, "k": k, "name": s.name, "dtype": types.dtype}
    rows: list[dict] = []

    def add(row: dict) -> None:
        rows.append(row)
        if emit:
            emit(row)

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
            add({**row, "error": f"{type(exc).__name__}: {exc}"[:300]})
            return
        add({**row, "median_ms": t.p50_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms, "reps": t.reps,
                     "timing": t.method, "rel_err": err, **met(t.p50_ms)})

    dense_fields = {"family": None, "pattern": None, "sparsity": 0.0, "tuned": False, "config_source": None,
                    "config": None}
    if baselines:
        copies = min(pool, copies_to_rotate((m * k + n * k) * 2))
        ws = [dense] + [dense.clone() for _ in range(copies - 1)]
        record({**dense_fields, "impl": "cublas", "engine": "tensor"}, lambda i: torch.mm(xs[i], ws[i].T), copies,
               dense, lambda ms: metrics(m, n, k, ms, 1.0, n * k * 2, "tensor"))
    if sgemm and baselines:
        copies = min(pool, copies_to_rotate((m * k + n * k) * 4))
        xs32 = [x.float() for x in xs[:copies]]
        ws32 = [dense.float() for _ in range(copies)]
        record({**dense_fields, "impl": "cublas_sgemm", "engine": "simt", "dtype": "f32"},
               lambda i: torch.mm(xs32[i], ws32[i].T), copies, dense,
               lambda ms: metrics(m, n, k, ms, 1.0, n * k * 4, "simt", 4, 4))

    weights: dict[tuple[str, str], Any] = {}
    for c in cases:
        fields = {"family": c.family, "impl": c.impl, "pattern": c.pattern,
                  "sparsity": Pattern.parse(c.pattern).sparsity, "engine": ENGINES[c.kind], "tuned": c.tuned,
                  "config_source": c.source, "config": c.config.to_record()}
        kid = (c.family, c.config, types)
        try:
            w0 = weights.get((c.kind, c.pattern))
            if w0 is None:
                w0 = weights[(c.kind, c.pattern)] = make_weight(w_full, c.pattern, c.kind)
            wb = weight_bytes(w0)
            copies = min(pool, copies_to_rotate(m * k * 2 + wb))
            cw = [w0] + [clone_weight(w0) for _ in range(copies - 1)]
            kern = get_kernel(kid)
        except Exception as exc:
            add({**base, **fields, "error": f"{type(exc).__name__}: {exc}"[:300]})
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


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:  # one family group's timing; the job on stdin
    sys.exit(worker_main(json.loads(sys.stdin.read())))

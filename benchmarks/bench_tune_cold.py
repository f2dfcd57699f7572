"""One problem tuned from a cold kernel cache, end to end (issue 4: "tunes in <= 10 min on the H100 host").

    CUTLASS_NM_CACHE=$(mktemp -d) python3 benchmarks/bench_tune_cold.py --shape 2048,11008,4096 --timeout 420 \\
        --out benchmarks/results/h100/tune_cold.json

Wall time covers everything `cutlass-nm tune` does (parallel nvcc on every core, isolated measurement, re-timing
the top configs, recording the winner); cuBLAS and cuSPARSELt (after mm_search) are timed afterwards in the same
process, so the winner is also reported as ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from cutlass_nm.bench.baselines import cusparselt_isolated
from cutlass_nm.bench.env import environment
from cutlass_nm.families import KernelTypes, Problem
from cutlass_nm.tune import tune_problem
from cutlass_nm.tune.worker import MeasureWorker


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="2048,11008,4096", help="M,N,K")
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--timeout", type=float, default=420.0, help="the tuner's own time limit, seconds")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    m, n, k = (int(v) for v in args.shape.split(","))
    cache = Path(os.environ.get("CUTLASS_NM_CACHE", ""))
    cold = cache.is_dir() and not any(cache.iterdir())
    problem = Problem(m, n, k, KernelTypes("f16", "f16", False))
    db = f"sqlite:///{tempfile.mkdtemp()}/tune.sqlite"
    t0 = time.time()
    res = tune_problem(problem, n_trials=args.trials, timeout_s=args.timeout, db_url=db,
                       progress=lambda msg: print(f"[{time.time() - t0:6.1f} s] {msg}", flush=True))
    wall = time.time() - t0
    worker = MeasureWorker()  # cuBLAS in the same isolated setup as the trials: the winner again, then dense
    again = worker.measure("sptc24_sm90", res.best_config, problem.types, (m, n, k), reps=100)
    worker.close()
    from bench_tuner import cublas_ms

    dense = cublas_ms(m, n, k)
    cslt = cusparselt_isolated(m, n, k, "f16", 100)
    best_cslt = min((v["median_ms"] for v in cslt.values() if "median_ms" in v), default=None)
    row = {"m": m, "n": n, "k": k, "cold_cache": cold, "wall_s": wall, "trials": res.trials, "measured": res.measured,
           "pruned": res.pruned, "failed": res.failed, "best_config": res.best_config.to_record(),
           "best_ms_tuner": res.best_ms, "best_ms_retimed": again.get("p50_ms"), "cublas_ms": dense,
           "cusparselt_best_ms": best_cslt, "cusparselt": cslt,
           "speedup_vs_cublas": dense / again["p50_ms"] if again.get("p50_ms") else None,
           "speedup_vs_cusparselt": best_cslt / again["p50_ms"] if best_cslt and again.get("p50_ms") else None}
    print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"environment": environment(), "rows": [row]}, indent=1))


if __name__ == "__main__":
    main()

"""Optuna against an exhaustive sweep, on the H100, for three 2:4 problems (issue 4's first acceptance).

    python3 benchmarks/bench_tuner.py --out tuner.json     # needs an sm_90 GPU; ~10 minutes on an H100

For each problem: every valid config of the sm90 space in the FIXED sub-space below is
measured in the isolated worker (the exhaustive sweep; its best 3 re-timed), then a fresh Optuna
study gets 25 % of the sweep's trial count (warm start and re-timing included in that budget's
process) and its winner is compared with the sweep's. cuBLAS and cuSPARSELt are timed in the same
run, so every figure is also a ratio. The JSON is in ``cutlass-nm bench``'s format: per problem, rows for cuBLAS,
each cuSPARSELt mode, the sweep's best and Optuna's best (with the study's counts).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import torch

from cutlass_nm.bench.baselines import cublas_dense, cusparselt_isolated
from cutlass_nm.bench.env import environment
from cutlass_nm.families import KernelTypes, Problem, get_family
from cutlass_nm.kernels import precompile
from cutlass_nm.store.fingerprint import current_environment
from cutlass_nm.timing import copies_to_rotate, time_rotating
from cutlass_nm.tune import tune_problem
from cutlass_nm.tune.space import all_configs
from cutlass_nm.tune.worker import MeasureWorker

PROBLEMS = [(8192, 8192, 8192), (2048, 11008, 4096), (256, 4096, 4096)]
# The sub-space measured here: stages auto, tile M 128/256, swizzle 1/4 (the rest of the family's space
# costs compile time this run cannot afford); 112 points per problem.
FIXED = {"stages": 0, "tile_m": (128, 256), "swizzle": (1, 4)}


def cublas_ms(m: int, n: int, k: int) -> float:
    copies = copies_to_rotate((m * k + n * k) * 2)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(copies)]
    ws = [torch.randn(n, k, device="cuda", dtype=torch.float16) for _ in range(copies)]
    t = time_rotating(cublas_dense(xs, ws), copies, reps=50).p50_ms
    del xs, ws
    torch.cuda.empty_cache()
    return t


def suite_rows(t: dict) -> list[dict]:
    """One problem as ``cutlass-nm bench`` rows (``speedup_vs_cusparselt_best``: over the fastest cuSPARSELt mode)."""
    base = {"m": t["m"], "n": t["n"], "k": t["k"], "name": None, "dtype": "f16", "engine": "tensor", "timing": "graph"}
    cb = t["cublas_ms"]
    cs = min((v["median_ms"] for v in t["cusparselt"].values() if "median_ms" in v), default=None)

    def row(impl: str, ms: float, family: str | None = None, pattern: str | None = "2:4", **extra) -> dict:
        return {**base, "family": family, "impl": impl, "pattern": pattern, "sparsity": 0.5 if pattern else 0.0,
                "tuned": impl == "sptc24_sm90_optuna", "config": extra.pop("config", None), "median_ms": ms,
                "speedup_vs_cublas": cb / ms, "speedup_vs_cusparselt_best": cs / ms if cs else None, **extra}

    rows = [row("cublas", cb, pattern=None)]
    rows += [row(name, v["median_ms"], p20_ms=v["p20_ms"], p80_ms=v["p80_ms"], reps=v["reps"])
             for name, v in t["cusparselt"].items() if "median_ms" in v]
    rows.append(row("sptc24_sm90_sweep_best", t["sweep_best_ms"], "sptc24_sm90", config=t["sweep_best_config"],
                    space_points=t["space_points"], sweep_s=t["sweep_s"]))
    if t["optuna_best_ms"]:
        rows.append(row("sptc24_sm90_optuna", t["optuna_best_ms"], "sptc24_sm90", config=t["optuna_best_config"],
                        space_points=t["space_points"], optuna_trials=t["optuna_trials"],
                        optuna_measured=t["optuna_measured"], optuna_pruned=t["optuna_pruned"],
                        optuna_s=t["optuna_s"], optuna_over_sweep=t["optuna_over_sweep"]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write the result JSON here")
    ap.add_argument("--fraction", type=float, default=0.25, help="Optuna's trials as a fraction of the sweep's points")
    args = ap.parse_args()
    fam = get_family("sptc24_sm90")
    types = KernelTypes("f16", "f16", False)
    env = current_environment("sptc24_sm90")
    rows = []
    for m, n, k in PROBLEMS:
        problem = Problem(m, n, k, types)
        configs = all_configs(fam, problem, FIXED)
        t0 = time.time()
        built = precompile([(fam.name, c, types) for c in configs])
        compile_s = time.time() - t0
        bad = sum(isinstance(b, Exception) for b in built)
        base = cublas_ms(m, n, k)
        cslt = cusparselt_isolated(m, n, k, "f16", 50)
        worker = MeasureWorker()
        t0 = time.time()
        sweep = [(c, worker.measure(fam.name, c, types, (m, n, k), reps=30)) for c in configs]
        ok = sorted(((c, r) for c, r in sweep if r["status"] == "ok"), key=lambda cr: cr[1]["p50_ms"])
        retimed = sorted(((c, worker.measure(fam.name, c, types, (m, n, k))) for c, _ in ok[:3]),
                         key=lambda cr: cr[1].get("p50_ms", math.inf))
        sweep_s = time.time() - t0
        worker.close()
        best_cfg, best = retimed[0][0], retimed[0][1]["p50_ms"]
        budget = max(1, math.ceil(args.fraction * len(configs)))
        with tempfile.TemporaryDirectory() as tmp:
            res = tune_problem(problem, n_trials=budget, db_url=f"sqlite:///{tmp}/t.sqlite", env=env, seed=0,
                               fixed=FIXED, retime_top=3)
        row = {"m": m, "n": n, "k": k, "space_points": len(configs), "build_failures": bad,
               "compile_s_warm_cache": compile_s, "sweep_s": sweep_s, "sweep_failures": len(sweep) - len(ok),
               "sweep_best_ms": best, "sweep_best_config": best_cfg.to_record(),
               "optuna_trials": res.trials, "optuna_measured": res.measured, "optuna_pruned": res.pruned,
               "optuna_failed": res.failed, "optuna_s": res.seconds, "optuna_best_ms": res.best_ms,
               "optuna_best_config": res.best_config.to_record() if res.best_config else None,
               "optuna_over_sweep": res.best_ms / best if res.best_ms else None,
               "cublas_ms": base, "cusparselt": cslt, "tuned": True,
               "sweep_speedup_vs_cublas": base / best,
               "optuna_speedup_vs_cublas": base / res.best_ms if res.best_ms else None}
        cs = [v["median_ms"] for v in cslt.values() if "median_ms" in v]
        row["optuna_speedup_vs_cusparselt_best"] = min(cs) / res.best_ms if cs and res.best_ms else None
        rows += suite_rows(row)
        print(json.dumps({k2: v for k2, v in row.items() if not isinstance(v, dict)}), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

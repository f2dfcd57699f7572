"""Several GPUs of one host tune one problem together, sharing one Optuna study (issue 4, "distributed").

    python3 benchmarks/bench_shared_study.py --gpus 2 --shape 2048,11008,4096 --trials 16 \\
        --out benchmarks/results/h200x2/shared_study.json

One tuning process per GPU (``CUDA_VISIBLE_DEVICES`` pins it), all on the same Optuna journal file and the same
tuning DB (whose claims table keeps two tuners from measuring one config). Afterwards the study and the DB are read
back: which GPU measured each trial, that no config was measured twice, that no trial was left running, and the
recorded winner.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path


def _worker(gpu: int, shape: tuple[int, int, int], trials: int, timeout: float, storage: str, db: str, jobs: int,
            log: str, dry_run: bool) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)  # before torch initializes CUDA in this process
    from cutlass_nm.families import KernelTypes, Problem
    from cutlass_nm.tune import perfmodel, tune_problem

    problem = Problem(*shape, KernelTypes("f16", "f16", False))
    stand_in = {}
    if dry_run:  # the performance model instead of a GPU, no compiles: checks the harness on a CPU
        from cutlass_nm.store.fingerprint import EnvFields

        def measure(cfg, reps: int = 50) -> dict:
            t = perfmodel.estimate_ms(cfg, problem)
            return {"status": "ok", "p20_ms": t, "p50_ms": t, "p80_ms": t, "iterations": reps}

        stand_in = {"measure": measure, "build": lambda cfg: None,
                    "env": EnvFields(gpu="dry-run", compute_capability="9.0a", sm_count=132, l2_bytes=50 << 20,
                                     cutlass_version="-", nvcc_version="-", template_hash="-", driver="-",
                                     torch_version="-")}

    t0 = time.time()
    with open(log, "w") as f:
        def progress(msg: str) -> None:
            f.write(json.dumps({"t": time.time() - t0, "gpu": gpu, "msg": msg}) + "\n")
            f.flush()

        res = tune_problem(problem, n_trials=trials, timeout_s=timeout, storage=storage, db_url=db, jobs=jobs,
                           seed=gpu, progress=progress, **stand_in)
        f.write(json.dumps({"t": time.time() - t0, "gpu": gpu, "done": True, "asked": res.trials,
                            "measured": res.measured, "pruned": res.pruned, "failed": res.failed,
                            "trial_numbers": [h["trial"] for h in res.history],
                            "best_ms": res.best_ms}) + "\n")


def _reasons(study) -> dict[str, int]:
    """Why trials were pruned: another tuner had claimed the config, or the family's validity check."""
    out: dict[str, int] = {}
    for t in study.trials:
        if "pruned" in t.user_attrs:
            why = "claimed by another tuner" if "claimed" in t.user_attrs["pruned"] else "invalid config"
            out[why] = out.get(why, 0) + 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--shape", default="2048,11008,4096", help="M,N,K")
    ap.add_argument("--trials", type=int, default=16, help="trials asked by each tuner")
    ap.add_argument("--timeout", type=float, default=300.0, help="each tuner's time limit, seconds")
    ap.add_argument("--dry-run", action="store_true", help="performance model instead of the GPU (harness check)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    shape = tuple(int(v) for v in args.shape.split(","))
    work = Path(tempfile.mkdtemp(prefix="shared_study_"))
    storage, db = f"journal:{work / 'study.journal'}", f"sqlite:///{work / 'tune.sqlite'}"
    jobs = max(1, (os.cpu_count() or 2) // args.gpus)

    from cutlass_nm.store.store import Store

    Store(db)  # create the schema once, before the tuners race for it
    ctx = mp.get_context("spawn")
    logs = [str(work / f"gpu{g}.jsonl") for g in range(args.gpus)]
    t0 = time.time()
    procs = [ctx.Process(target=_worker, args=(g, shape, args.trials, args.timeout, storage, db, jobs, logs[g],
                                                            args.dry_run))
             for g in range(args.gpus)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall = time.time() - t0

    import optuna

    from cutlass_nm.store.store import Store as _Store
    from cutlass_nm.tune.tuner import _open_study

    summaries = []
    for g, log in enumerate(logs):
        lines = [json.loads(x) for x in Path(log).read_text().splitlines()] if Path(log).exists() else []
        done = next((x for x in lines if x.get("done")), None)
        summaries.append({"gpu": g, "exitcode": procs[g].exitcode, **(done or {"done": False})})
    store = _Store(db, create=False)
    rows = [m for _, m in store.measurements() if m.study and not m.study.endswith(":retime")]
    names = {m.study for m in rows}
    (name,) = names
    study = _open_study(name, storage, optuna.samplers.RandomSampler(), 1)
    states = [t.state.name for t in study.trials]
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    keys = [json.dumps(t.params, sort_keys=True) for t in complete]
    by_gpu = {s["gpu"]: set(s.get("trial_numbers", [])) for s in summaries}
    winners = store.winners()
    result = {
        "shape": shape, "gpus": args.gpus, "trials_per_tuner": args.trials, "wall_s": wall, "study": name,
        "tuners": summaries,
        "study_trials": len(states), "states": {s: states.count(s) for s in sorted(set(states))},
        "measured_configs": len(keys), "distinct_measured_configs": len(set(keys)),
        "db_measurements": len(rows), "db_distinct_configs": len({m.config_key for m in rows}),
        "trials_measured_by_both_gpus": len(set.intersection(*by_gpu.values())) if len(by_gpu) > 1 else 0,
        "running_left": states.count("RUNNING"),
        "pruned_reasons": _reasons(study),
        "winner": [{"config": w.config, "p50_ms": w.p50_ms} for _, w in winners],
        "best_completed_ms": min((t.value for t in complete), default=None),
    }
    from cutlass_nm.bench.env import environment

    print(json.dumps(result, indent=1), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": environment(), "command": "python3 benchmarks/"
                                        f"bench_shared_study.py --gpus {args.gpus} --shape {args.shape} "
                                        f"--trials {args.trials}", "result": result}, indent=1))


if __name__ == "__main__":
    main()

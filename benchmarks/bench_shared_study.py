"""Several GPUs of one host tune one problem together, sharing one Optuna study (issue 4, "distributed").

    python3 benchmarks/bench_shared_study.py --gpus 2 --shape 2048,11008,4096 --trials 16 \\
        --out benchmarks/results/h200x2/shared_study.json

One tuning process per GPU (``cutlass_nm.tune.gpus``, as ``cutlass-nm tune --gpus``), all on the same Optuna
journal file and the same tuning DB (whose claims table keeps two tuners from measuring one config). Afterwards the
study and the DB are read back: which GPU measured each trial, that no config was measured twice, that no trial was
left running, and the recorded winner.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import optuna

from cutlass_nm.families import KernelTypes, Problem
from cutlass_nm.store.store import Store
from cutlass_nm.tune.gpus import tune_on_gpus
from cutlass_nm.tune.tuner import optuna_storage


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
    t0 = time.time()
    runs = tune_on_gpus(Problem(*shape, KernelTypes("f16", "f16", False)), list(range(args.gpus)),
                        family="sptc24_sm90", n_trials=args.trials, timeout_s=args.timeout, storage=storage, db_url=db,
                        stand_in=args.dry_run, progress=lambda done, msg: print(f"[{done:3d}] {msg}", flush=True))
    wall = time.time() - t0

    summaries = runs
    store = Store(db, create=False)
    rows = [m for _, m in store.measurements() if m.study and not m.study.endswith(":retime")]
    names = {m.study for m in rows}
    (name,) = names
    study = optuna.load_study(study_name=name, storage=optuna_storage(storage))
    states = [t.state.name for t in study.trials]
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    keys = [json.dumps(t.params, sort_keys=True) for t in complete]
    by_gpu = {s["gpu"]: set(s["trials"]) for s in summaries}
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

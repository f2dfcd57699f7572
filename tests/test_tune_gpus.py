"""One tuning process per GPU sharing one journal study and tuning DB (cutlass_nm.tune.gpus), on a CPU: the
performance model stands in for the GPU, so what is checked is the multi-process plumbing."""

from __future__ import annotations

import argparse
import json

import optuna
import pytest
from tune_helpers import PROBLEM

from cutlass_nm.cli import _gpu_list
from cutlass_nm.store.store import Store
from cutlass_nm.tune.gpus import tune_on_gpus
from cutlass_nm.tune.tuner import optuna_storage


def test_two_processes_share_one_study(tmp_path):
    storage, db = f"journal:{tmp_path / 'study.log'}", f"sqlite:///{tmp_path / 'tune.sqlite'}"
    seen: list[str] = []
    runs = tune_on_gpus(PROBLEM, [0, 1], family="sptc24_sm90", n_trials=8, storage=storage, db_url=db,
                        stand_in=True, progress=lambda done, msg: seen.append(msg))
    assert [r["gpu"] for r in runs] == [0, 1] and sum(r["asked"] for r in runs) == 16
    (summary,) = optuna.get_all_study_summaries(optuna_storage(storage))
    study = optuna.load_study(study_name=summary.study_name, storage=optuna_storage(storage))
    states = [t.state for t in study.trials]
    assert len(states) == 16, "every asked trial is in the shared study"
    assert optuna.trial.TrialState.RUNNING not in states
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    keys = [json.dumps(t.params, sort_keys=True) for t in done]
    assert done and len(keys) == len(set(keys)), "no config measured twice"
    assert sum(r["measured"] for r in runs) == len(done)
    assert not set(runs[0]["trials"]) & set(runs[1]["trials"]), "no trial measured by both processes"
    assert len(seen) == len(done) and all(m.startswith("GPU ") for m in seen)
    (_, winner), = Store(db, create=False).winners()
    assert winner.p50_ms == pytest.approx(min(t.value for t in done))


def test_gpu_list_argument():
    assert _gpu_list("0,1") == [0, 1] and _gpu_list("all") == "all"
    for bad in ("0,0", "x", "-1", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            _gpu_list(bad)


def test_tune_api_takes_gpus(tmp_path):
    """cutlass_nm.tune.tune(..., gpus=[...]) routes each problem to the per-GPU processes."""
    from cutlass_nm.tune import tune

    (runs,) = tune([(PROBLEM.m, PROBLEM.n, PROBLEM.k)], gpus=[3], n_trials=4, stand_in=True,
                   storage=f"journal:{tmp_path / 's.log'}", db_url=f"sqlite:///{tmp_path / 't.sqlite'}")
    assert [r["gpu"] for r in runs] == [3] and runs[0]["asked"] == 4 and runs[0]["measured"] >= 1

"""Coordination test: several tuning processes share one Optuna study through the machine's real
PostgreSQL (skipped, with the reason, if unreachable), with a deterministic stand-in objective.
No config is measured twice, no trial is lost, and the winner is recorded."""

from __future__ import annotations

import json
import multiprocessing as mp

import optuna
from store_helpers import env
from test_store import _pg_schema_url
from tune_helpers import PROBLEM, fake_measure, tuner_process

from cutlass_nm.families import get_family, perfmodel
from cutlass_nm.store.store import Store
from cutlass_nm.tune import tune_problem
from cutlass_nm.tune.space import all_configs
from cutlass_nm.tune.tuner import study_name


def test_three_tuners_share_one_study_through_postgres():
    engine, schema, url = _pg_schema_url()
    try:
        Store(url)  # tuning DB schema, once
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=tuner_process, args=(url, 15, seed)) for seed in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(600)
        assert [p.exitcode for p in procs] == [0, 0, 0]

        name = study_name("sptc24_sm90", PROBLEM, env())
        study = optuna.load_study(study_name=name, storage=url)
        states = [t.state for t in study.trials]
        assert len(states) == 45, "every asked trial is in the study"
        assert optuna.trial.TrialState.RUNNING not in states, "no trial was left behind"
        measured = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        keys = [json.dumps(t.params, sort_keys=True) for t in measured]
        assert len(keys) == len(set(keys)), "a config was measured twice"

        store = Store(url, create=False)
        rows = store.measurements(study=name)
        assert len(rows) == len(measured)
        assert sorted(m.config_key for _, m in rows) == sorted(keys)
        (_, winner), = store.winners()
        assert winner.p50_ms == min(t.value for t in measured)
    finally:
        from sqlalchemy import text

        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))


def test_invalid_configs_are_pruned_without_compiling(tmp_path):
    built = []
    result = tune_problem(PROBLEM, n_trials=30, storage=None, db_url=f"sqlite:///{tmp_path / 't.sqlite'}", env=env(),
                          measure=fake_measure, build=built.append, jobs=2, seed=0, warm_start=4)
    assert result.pruned > 0 and result.measured == len(built)
    assert result.measured + result.pruned + result.failed == result.trials == 30
    assert result.best_config is not None


def test_perfmodel_prefers_full_waves_and_big_tiles():
    cfgs = all_configs(get_family("sptc24_sm90"), PROBLEM)
    ranked = perfmodel.rank(cfgs, PROBLEM)
    assert perfmodel.estimate_ms(ranked[0], PROBLEM) <= perfmodel.estimate_ms(ranked[-1], PROBLEM)
    assert ranked[0].tile_m * ranked[0].tile_n >= 128 * 128


def test_two_tuners_share_a_journal_file(tmp_path):
    url = f"journal:{tmp_path / 'study.log'}"
    db = f"sqlite:///{tmp_path / 't.sqlite'}"
    Store(db)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=tuner_process, args=(url, 10, seed), kwargs={"db": db}) for seed in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0]
    from cutlass_nm.tune.tuner import optuna_storage

    study = optuna.load_study(study_name=study_name("sptc24_sm90", PROBLEM, env()), storage=optuna_storage(url))
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    keys = [json.dumps(t.params, sort_keys=True) for t in done]
    assert len(study.trials) == 20 and len(keys) == len(set(keys))

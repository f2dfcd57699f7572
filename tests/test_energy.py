"""Energy-aware tuning on a CPU: fake NVML bookkeeping, migration 0003 from an existing DB, energy fields in
records, the dispatch objective policy, a Pareto study with a deterministic stand-in, the energy model."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from store_helpers import CONFIGS, SM90, env, key
from tune_helpers import PROBLEM, fake_measure, no_build

from cutlass_nm.bench.energy import EnergyMeter
from cutlass_nm.build.resources import parse_resource_usage
from cutlass_nm.errors import InputError
from cutlass_nm.store.lookup import TunedSelector, dispatch_objective
from cutlass_nm.store.store import Store
from cutlass_nm.store.validate import RecordError, validate_measurement
from cutlass_nm.tune import tune_problem
from cutlass_nm.tune.energymodel import EnergyModel, Sample, kfold_error, rank


class FakeNVML:
    """Energy rises 500 mJ per s of fake time (500 W); the clock reads 1755 MHz."""

    NVML_CLOCK_SM = 1

    def __init__(self, clock) -> None:
        self.clock = clock

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle) -> int:
        return round(self.clock.now * 5e5) + 10_000_000  # mJ: 500 J per s

    def nvmlDeviceGetClockInfo(self, handle, kind) -> int:
        assert kind == self.NVML_CLOCK_SM
        return 1755


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_energy_bookkeeping_with_fake_nvml():
    clock = FakeClock()
    meter = EnergyMeter(FakeNVML(clock))
    calls_per_step, step_s = 4, 0.002  # a graph of 4 calls takes 2 ms

    def step():
        clock.now += step_s

    e = meter.measure(step, calls_per_step, sync=lambda: None, min_ms=100.0, clock=clock)
    assert e.window_ms >= 100.0
    assert e.calls == calls_per_step * round(e.window_ms / 2)
    assert e.avg_power_w == pytest.approx(500, rel=0.02)
    assert e.joules_per_call == pytest.approx(500 * step_s / calls_per_step, rel=0.02)
    assert e.sm_clock_mhz == 1755


def test_resource_usage_parse():
    text = ("Function _Z6helperv:\nREG:32 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:384\n"
            "Function _ZN7cutlass13device_kernel:\nREG:168 STACK:16 SHARED:1024 LOCAL:0 CONSTANT[0]:900\n")
    assert parse_resource_usage(text) == {"regs": 168, "stack": 16, "static_smem": 1024}
    assert parse_resource_usage("") == {"regs": 0, "stack": 0, "static_smem": 0}


def _rec(**over) -> dict:
    rec = {**key().to_dict(), "environment": env().to_dict(), "m": 2048, "config": CONFIGS[0].to_record(),
           "status": "ok", "p50_ms": 1.0, "iterations": 5, "host": "h", "uid": "0" * 8 + "-0000" * 3 + "-" + "0" * 12,
           "created_at": "2026-01-01"}
    rec.update(over)
    return rec


def test_energy_fields_validate_like_other_numbers():
    assert validate_measurement(_rec())["joules"] is None  # old records stay valid
    r = validate_measurement(_rec(joules=0.5, avg_power_w=500, sm_clock_mhz=1755.0))
    assert (r["joules"], r["avg_power_w"], r["sm_clock_mhz"]) == (0.5, 500.0, 1755.0)
    for bad in (-1.0, float("nan"), float("inf"), "1.0", True):
        with pytest.raises(RecordError):
            validate_measurement(_rec(joules=bad))


def test_migration_upgrades_an_existing_db(tmp_path):
    from sqlalchemy import inspect

    from cutlass_nm.store.db import make_engine, upgrade

    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    upgrade(make_engine(url), "0002")
    old = Store(url, create=False)
    assert [c["name"] for c in inspect(old.engine).get_columns("winners") if c["name"] == "objective"] == []
    from sqlalchemy import text
    with old.engine.begin() as conn:  # a pre-0003 row, written as the old code did
        fields = {"hard_key": env().hard_key, "soft_key": env().soft_key, **env().to_dict()}
        names = ", ".join(fields)
        conn.execute(text(f"INSERT INTO environments ({names}) VALUES ({', '.join(':' + f for f in fields)})"), fields)
        cols = ", ".join(key().to_dict())
        vals = ", ".join(repr(v) if not isinstance(v, bool) else str(int(v)) for v in key().to_dict().values())
        conn.execute(text(f"INSERT INTO winners (environment_id, {cols}, config, p50_ms, measurement_uid) VALUES "
                          f"(1, {vals}, '{json.dumps(CONFIGS[1].to_record())}', 2.0, '{'x' * 36}')"))
    (_, w), = old.winners()  # read without upgrading
    assert w.p50_ms == 2.0 and old.winners(objective="energy") == []
    store = Store(url)  # upgrades to head
    (_, w), = store.winners()
    assert (w.objective, w.score, w.p50_ms) == ("time", 2.0, 2.0)
    store.record(env(), key(), 2048, CONFIGS[2], p50_ms=1.5, iterations=3, joules=0.9, avg_power_w=600,
                 sm_clock_mhz=1600)
    store.record(env(), key(), 2048, CONFIGS[3], p50_ms=1.8, iterations=3, joules=0.6, avg_power_w=333)
    best = {o: store.winners(objective=o)[0][1] for o in ("time", "energy", "edp")}
    assert best["time"].config == CONFIGS[2].to_record()
    assert best["energy"].config == CONFIGS[3].to_record() and best["energy"].score == 0.6
    assert best["edp"].score == pytest.approx(min(0.9 * 1.5, 0.6 * 1.8))
    # export -> merge keeps the energy fields
    import io
    buf = io.StringIO()
    store.export(buf)
    other = Store(f"sqlite:///{tmp_path / 'new.sqlite'}")
    assert other.merge(buf.getvalue().splitlines())["new"] == 2
    assert sorted(m.joules for _, m in other.measurements()) == [0.6, 0.9]
    assert other.winners(objective="energy")[0][1].config == CONFIGS[3].to_record()


def test_dispatch_objective_policy(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    store = Store(url)
    store.record(env(), key(), 2048, CONFIGS[0], p50_ms=1.0, iterations=3, joules=1.0)
    store.record(env(), key(), 2048, CONFIGS[1], p50_ms=1.2, iterations=3, joules=0.5)
    store.record(env(), key(n=8192), 2048, CONFIGS[4], p50_ms=1.0, iterations=3)  # no energy measured
    monkeypatch.delenv("CUTLASS_NM_OBJECTIVE", raising=False)
    assert dispatch_objective() == "time"
    problem = PROBLEM.__class__(2048, 4096, 4096, PROBLEM.types)
    other = PROBLEM.__class__(2048, 8192, 4096, PROBLEM.types)
    assert TunedSelector(url, env=env())(SM90, problem) == CONFIGS[0]
    assert TunedSelector(url, env=env(), objective="energy")(SM90, problem) == CONFIGS[1]
    monkeypatch.setenv("CUTLASS_NM_OBJECTIVE", "EDP")
    sel = TunedSelector(url, env=env())
    assert sel.objective == "edp" and sel(SM90, problem) == CONFIGS[1]  # 0.5 x 1.2 < 1.0 x 1.0
    assert TunedSelector(url, env=env(), objective="energy")(SM90, other) == CONFIGS[1]  # nearest energy winner
    monkeypatch.setenv("CUTLASS_NM_OBJECTIVE", "joules")
    with pytest.warns(RuntimeWarning, match="CUTLASS_NM_OBJECTIVE"):
        assert dispatch_objective() == "time"
    with pytest.raises(InputError):
        dispatch_objective("fast")


def _fake_energy(cfg, reps: int = 50) -> dict:
    res = fake_measure(cfg, reps)
    watts = 400 + 150 * (cfg.tile_k == 128) + 50 * (cfg.schedule == "pingpong")  # energy disagrees with time
    return {**res, "joules": watts * res["p50_ms"] * 1e-3, "avg_power_w": watts, "sm_clock_mhz": 1700.0}


def test_pareto_study_with_stand_in(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.sqlite'}"
    res = tune_problem(PROBLEM, n_trials=24, db_url=url, env=env(), measure=_fake_energy, build=no_build, jobs=2,
                       seed=3, warm_start=4, retime_top=2, objective="pareto")
    assert res.objective == "pareto" and res.measured > 4 and res.pareto
    pts = [(p["p50_ms"], p["joules"]) for p in res.pareto]
    assert pts == sorted(pts) and all(a[1] > b[1] for a, b in itertools.pairwise(pts))  # a true front
    store = Store(url, create=False)
    rows = [m for _, m in store.measurements() if m.joules is not None]
    assert rows and min(m.joules for m in rows) == store.winners(objective="energy")[0][1].score
    energy = tune_problem(PROBLEM, n_trials=8, db_url=url, env=env(), measure=_fake_energy, build=no_build, jobs=2,
                          seed=4, warm_start=4, retime_top=1, objective="energy")  # model warm start (>= 10 rows)
    assert energy.best_joules is not None
    no_nvml = tune_problem(PROBLEM, n_trials=3, env=env(), db_url=f"sqlite:///{tmp_path / 'n.sqlite'}",
                           measure=fake_measure, build=no_build, jobs=2, seed=1, warm_start=3, objective="energy")
    assert no_nvml.measured == 0 and no_nvml.failed == 3 and no_nvml.best_config is None  # energy missing: failed
    with pytest.raises(InputError):
        tune_problem(PROBLEM, n_trials=1, env=env(), measure=fake_measure, build=no_build, objective="speed")


def test_energy_model_fits_synthetic_data():
    rng = np.random.default_rng(0)
    samples = []
    for cfg in CONFIGS * 3:
        for m, n, k in ((256, 4096, 4096), (2048, 11008, 4096), (8192, 8192, 8192)):
            t = float(rng.uniform(0.02, 2.0))
            watts = 350 + 120 * (cfg.tile_k == 128) + 60 * math.log2(cfg.tile_m / 64) + rng.normal(0, 3)
            samples.append(Sample(m, n, k, cfg.to_record(), t, watts * t * 1e-3, 168, 0))
    err = kfold_error(samples, folds=5)
    assert err["mape_pct"] < 3 < err["baseline_const_power_mape_pct"]
    model = EnergyModel.fit(samples)
    slow = SM90.Config(tile_m=128, tile_n=128, tile_k=64)
    hungry = SM90.Config(tile_m=128, tile_n=128, tile_k=128)
    assert rank(model, [hungry, slow], PROBLEM)[0] == slow or rank(model, [hungry, slow], PROBLEM, "edp")
    with pytest.raises(ValueError):
        EnergyModel.fit(samples[:2])

"""A deterministic stand-in for GPU measurement, so tuning coordination can be tested on a CPU."""

from __future__ import annotations

import json
import zlib

from store_helpers import env

from cutlass_nm.families import KernelTypes, Problem, perfmodel

PROBLEM = Problem(2048, 4096, 4096, KernelTypes("f16", "f16", False))


def fake_measure(cfg, reps: int = 50) -> dict:
    jitter = zlib.crc32(json.dumps(cfg.to_record(), sort_keys=True).encode()) % 97  # stable across processes
    t = perfmodel.estimate_ms(cfg, PROBLEM) * (1 + jitter / 1e4)
    return {"status": "ok", "p20_ms": t * 0.99, "p50_ms": t, "p80_ms": t * 1.01, "iterations": reps}


def no_build(cfg) -> None:
    return None


def tuner_process(url: str, trials: int, seed: int, db: str | None = None) -> None:
    from cutlass_nm.tune import tune_problem

    tune_problem(PROBLEM, n_trials=trials, storage=url, db_url=db or url, env=env(), measure=fake_measure,
                 build=no_build, jobs=2, seed=seed, warm_start=4, retime_top=2)

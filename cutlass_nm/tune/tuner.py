"""The tuning loop: Optuna ask/tell, compiles overlapped with timing, claims, re-timing, DB records.

For each problem: a study (Optuna storage: the tuning DB's URL, a journal file, or in memory) is
warm-started with the roofline model's top configs and the DB's nearest winners; trials whose
config is invalid are pruned before any compile; a valid config is claimed in the tuning DB (no
two tuners, on one host or many, measure the same config of a study), compiled in a thread pool
ahead of the GPU, measured in an isolated worker process, told back, and recorded. The best few
are re-timed in interleaved rounds before the winner is recorded.

``objective`` picks what a trial's value is: "time" (median ms), "energy" (joules per call from NVML),
"edp" (joules x ms), or "pareto" (a two-objective study: time and energy). Every measurement with energy
updates the DB's winner for each objective; energy objectives warm-start from the energy model when the DB
holds enough energy measurements of the family, else from the roofline.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

import optuna

from ..families import KernelTypes, Problem, get_family, perfmodel
from ..formats.nm import NMWeight
from ..store.fingerprint import EnvFields, ProblemKey
from .space import space_of, suggest

Measure = Callable[[Any], dict]  # config -> {"status", "p50_ms", ...}
Build = Callable[[Any], object]  # config -> compiled artifact (or raises BuildError)
OBJECTIVES = ("time", "energy", "edp", "pareto")
ENERGY_MS = 200.0  # NVML counter window per energy measurement


@dataclass
class TuneResult:
    problem: Problem
    best_config: Any
    best_ms: float | None
    trials: int
    measured: int
    pruned: int
    failed: int
    seconds: float
    history: list[dict] = field(default_factory=list)
    objective: str = "time"
    best_joules: float | None = None
    pareto: list[dict] = field(default_factory=list)  # the non-dominated (config, p50_ms, joules), pareto only


def trial_values(objective: str, res: dict) -> float | tuple[float, float] | None:
    """The value(s) Optuna minimizes for a measured result; None when energy is needed but missing."""
    ms, joules = res.get("p50_ms"), res.get("joules")
    if objective == "time":
        return ms
    if joules is None:
        return None
    return {"energy": joules, "edp": joules * ms, "pareto": (ms, joules)}[objective]


def pareto_front(points: list[dict]) -> list[dict]:
    """The points no other point beats in both p50_ms and joules, fastest first."""
    front = [p for p in points if not any(q["p50_ms"] <= p["p50_ms"] and q["joules"] <= p["joules"]
                                          and (q["p50_ms"], q["joules"]) != (p["p50_ms"], p["joules"])
                                          for q in points)]
    return sorted(front, key=lambda p: p["p50_ms"])


def study_name(family: str, problem: Problem, env: EnvFields, objective: str = "time") -> str:
    key = ProblemKey.of(family, problem)
    t = problem.types
    return (f"{family}:{key.pattern}:m{problem.m}:n{problem.n}:k{problem.k}:{t.dtype}>{t.out_dtype}"
            f":{'bias' if t.bias else 'nobias'}:{env.hard_key[:12]}" + ("" if objective == "time" else f":{objective}"))


def _default_build(family_name: str, types: KernelTypes) -> Build:
    from ..kernels import precompile

    def build(cfg: Any) -> object:
        (res,) = precompile([(family_name, cfg, types)], workers=1)
        if isinstance(res, Exception):
            raise res
        return res

    return build


def _warm_ranking(store: Any, env: EnvFields, fam: Any, problem: Problem, fixed: dict[str, Any] | None,
                  objective: str, min_samples: int = 10) -> list[Any]:
    """The family's candidate configs best first: by the energy model fitted on the DB's energy measurements of this
    family and hardware (energy objectives, when there are ``min_samples``), else by the roofline time estimate."""
    configs = fam.candidates(problem, space_of(fam, fixed))
    if objective != "time":
        from . import energymodel

        samples = [energymodel.Sample(m.m, m.n, m.k, m.config, m.p50_ms, m.joules)
                   for e, m in store.measurements(family=fam.name, status="ok")
                   if e.hard_key == env.hard_key and m.joules and m.p50_ms]
        if len(samples) >= min_samples:
            model = energymodel.EnergyModel.fit(samples)
            return energymodel.rank(model, configs, problem, "edp" if objective == "edp" else "energy",
                                    env.sm_count)
    return perfmodel.rank(configs, problem, env.sm_count)


def _nearest_winners(store: Any, env: EnvFields, family: str, problem: Problem, count: int,
                     objective: str = "time") -> list[Any]:
    """Winners of the nearest tuned shapes on this environment (warm-start candidates)."""
    import math

    from ..store.validate import RecordError, validate_config

    key = ProblemKey.of(family, problem)
    scored = []
    for _, w in store.winners(hard_key=env.hard_key, objective=objective):
        if (w.family, w.pattern, w.dtype, w.out_dtype, w.bias) != (family, key.pattern, key.dtype, key.out_dtype,
                                                                    key.bias):
            continue
        try:
            cfg = validate_config(family, w.config)
        except RecordError:
            continue
        d = abs(math.log2(w.m_bucket / key.m_bucket)) + abs(math.log2(w.n / key.n)) + abs(math.log2(w.k / key.k))
        scored.append((d, cfg))
    return [cfg for _, cfg in sorted(scored, key=lambda s: s[0])[:count]]


def optuna_storage(url: str | None) -> optuna.storages.BaseStorage | str | None:
    """``journal:/path/file.log`` -> a journal file (many processes on one host); an SQLAlchemy URL -> RDB
    storage (PostgreSQL for many hosts); None -> in memory."""
    if url and url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
    return url


def _open_study(name: str, storage: str | None, sampler: optuna.samplers.BaseSampler, objectives: int = 1
                ) -> optuna.Study:
    """Create or join a study; several processes starting at once race on the storage's first setup."""
    from sqlalchemy.exc import SQLAlchemyError

    storage = optuna_storage(storage)
    for attempt in range(5):
        try:
            return optuna.create_study(study_name=name, storage=storage, directions=["minimize"] * objectives,
                                       sampler=sampler, load_if_exists=True)
        except (SQLAlchemyError, optuna.exceptions.DuplicatedStudyError):
            if attempt == 4:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def tune_problem(problem: Problem, *, family: str = "sptc24_sm90", n_trials: int = 40,
                 timeout_s: float | None = None, storage: str | None = None, db_url: str | None = None,
                 env: EnvFields | None = None, measure: Measure | None = None, build: Build | None = None,
                 jobs: int | None = None, warm_start: int = 8, retime_top: int = 3, retime_rounds: int = 3,
                 seed: int | None = None, fixed: dict[str, Any] | None = None,
                 progress: Callable[[str], None] | None = None, objective: str = "time") -> TuneResult:
    """Tune one problem for ``objective``; returns the best config found (also recorded as the DB winner).
    With "pareto" the best is the fastest point of the front and ``pareto`` lists the front. The ``retime_top``
    best are re-timed in ``retime_rounds`` interleaved rounds and judged by their median round."""
    from ..errors import InputError
    from ..store.store import Store

    if objective not in OBJECTIVES:
        raise InputError(f"objective {objective!r} is not one of {OBJECTIVES}")
    energy_ms = 0.0 if objective == "time" else ENERGY_MS
    fam = get_family(family)
    if getattr(fam, "weight", None) is NMWeight and not problem.vector:
        from ..bench.run import NM_VECTOR

        problem = replace(problem, vector=NM_VECTOR)  # what the worker times (make_weight): exact check()s
    store = Store(db_url)
    worker = None
    if env is None:
        from ..store.fingerprint import current_environment

        env = current_environment(family)
    if measure is None:
        from .worker import MeasureWorker

        worker = MeasureWorker()

        def measure(cfg: Any, reps: int = 50) -> dict:
            return worker.measure(family, cfg, problem.types, (problem.m, problem.n, problem.k), reps, energy_ms,
                                  problem.pattern)

    build = build or _default_build(family, problem.types)
    name = study_name(family, problem, env, objective)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    startup = min(10, max(1, n_trials // 4))
    sampler = (optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(20, n_trials // 2)))
               if objective == "pareto" else optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup))
    study = _open_study(name, storage, sampler, 2 if objective == "pareto" else 1)
    if warm_start and not study.trials:
        starts = _nearest_winners(store, env, family, problem, 2, "energy" if energy_ms else "time")
        starts += _warm_ranking(store, env, fam, problem, fixed, objective)[:warm_start]
        allowed = space_of(fam, fixed)
        for cfg in starts:
            if all(getattr(cfg, k) in v for k, v in allowed.items()):
                study.enqueue_trial(cfg.to_record(), skip_if_exists=True)
    key = ProblemKey.of(family, problem)
    t0 = time.time()
    stats = {"asked": 0, "measured": 0, "pruned": 0, "failed": 0}
    inflight: dict[Future, tuple[optuna.trial.Trial, Any]] = {}
    pool = ThreadPoolExecutor(max_workers=jobs or max(1, os.cpu_count() or 1))
    history: list[dict] = []

    def out_of_time() -> bool:
        return timeout_s is not None and time.time() - t0 > timeout_s

    def finish(trial: optuna.trial.Trial, cfg: Any, res: dict) -> None:
        status = res.get("status", "runtime_error")
        store.record(env, key, problem.m, cfg, status, p20_ms=res.get("p20_ms"), p50_ms=res.get("p50_ms"),
                     p80_ms=res.get("p80_ms"), iterations=res.get("iterations", 0), study=name, trial=trial.number,
                     **_energy(res))
        history.append({"trial": trial.number, "config": cfg.to_record(), **res})
        values = trial_values(objective, res) if status == "ok" else None
        if status == "ok" and values is None:
            status, res = "no_energy", {**res, "error": "no energy reading (pynvml missing or no energy counter)"}
        if values is not None:
            study.tell(trial, values)
            stats["measured"] += 1
        else:
            trial.set_user_attr("error", str(res.get("error", status))[:300])
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            stats["failed"] += 1
        if progress:
            best = min((v for h in history if h.get("status") == "ok"
                        and isinstance(v := trial_values(objective, h), float)), default=None)
            progress(f"trial {trial.number}: {status} {res.get('p50_ms') or ''} | best {best}")

    try:
        while True:
            while len(inflight) < max(2, (jobs or 4)) and stats["asked"] < n_trials and not out_of_time():
                trial = study.ask()
                stats["asked"] += 1
                cfg = suggest(trial, fam, fixed)
                reason = fam.check(cfg, problem)
                if reason is not None or not store.claim(name, cfg):
                    trial.set_user_attr("pruned", reason or "already claimed by another tuner")
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                    stats["pruned"] += 1
                    continue
                inflight[pool.submit(build, cfg)] = (trial, cfg)
            if not inflight:
                break
            done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
            for fut in done:
                trial, cfg = inflight.pop(fut)
                try:
                    fut.result()
                except Exception as exc:  # a compile error fails this trial only
                    finish(trial, cfg, {"status": "compile_error", "error": str(exc)[:300]})
                    continue
                finish(trial, cfg, measure(cfg))
        # Re-time the best few before trusting a winner, in interleaved rounds: on a power-limited GPU a config's
        # time moves with what ran just before it (docs/decisions/dispatch.md), so each is timed once per round, in
        # rotating order, and judged by its median round; a config that fails any round is dropped.
        scalar = "time" if objective == "pareto" else objective
        scored = [h for h in history if h.get("status") == "ok" and trial_values(scalar, h) is not None]
        top = [fam.Config.from_record(h["config"]) for h in sorted(scored, key=lambda h: trial_values(scalar, h))
               [:retime_top]]
        rounds: list[list[dict] | None] = [[] for _ in top]
        for r in range(max(1, retime_rounds) if top else 0):
            for i in [*range(r % len(top), len(top)), *range(r % len(top))]:
                if rounds[i] is not None:
                    res = measure(top[i])
                    ok = res.get("status") == "ok" and trial_values(scalar, res) is not None
                    rounds[i] = [*rounds[i], res] if ok else None
        best_cfg, best_ms, best_joules, best_value = None, None, None, None
        for cfg, results in zip(top, rounds, strict=True):
            if not results:
                continue
            res = sorted(results, key=lambda x: trial_values(scalar, x))[(len(results) - 1) // 2]  # median round
            store.record(env, key, problem.m, cfg, "ok", p20_ms=res["p20_ms"], p50_ms=res["p50_ms"],
                         p80_ms=res["p80_ms"], iterations=sum(x.get("iterations", 0) for x in results),
                         study=f"{name}:retime", **_energy(res))
            value = trial_values(scalar, res)
            if best_value is None or value < best_value:
                best_cfg, best_ms, best_joules, best_value = cfg, res["p50_ms"], res.get("joules"), value
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        if worker is not None:
            worker.close()
    front = pareto_front([{"config": h["config"], "p50_ms": h["p50_ms"], "joules": h["joules"]} for h in history
                          if h.get("status") == "ok" and h.get("joules") is not None]) if objective == "pareto" else []
    return TuneResult(problem, best_cfg, best_ms, stats["asked"], stats["measured"], stats["pruned"],
                      stats["failed"], time.time() - t0, history, objective, best_joules, front)


def _energy(res: dict) -> dict:
    return {f: res.get(f) for f in ("joules", "avg_power_w", "sm_clock_mhz")}

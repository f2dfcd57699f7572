"""The tuner's re-timing: the best few configs timed in interleaved rounds, judged by their median round."""

from __future__ import annotations

from store_helpers import env
from tune_helpers import PROBLEM, fake_measure, no_build

from cutlass_nm.store.store import Store
from cutlass_nm.tune import tune_problem


def test_retime_rounds_rotate_and_take_the_median_round(tmp_path):
    """A stand-in GPU that runs the first config of every round 30 % fast (a cool, boosted GPU): with rounds in
    rotating order each config is first once, so its median round is its true time and the true best wins."""
    calls: list[tuple] = []
    seen: set[tuple] = set()
    n_trials, top, rounds = 12, 3, 3

    def measure(cfg, reps: int = 50) -> dict:
        res = fake_measure(cfg, reps)
        c = tuple(cfg.to_record().values())
        if calls or c in seen:  # trials never measure a config twice: a repeat starts the re-timing
            if len(calls) % top == 0:  # the first measurement of each round
                res = {**res, "p50_ms": res["p50_ms"] * 0.7}
            calls.append(c)
        seen.add(c)
        return res

    db = f"sqlite:///{tmp_path / 'tune.sqlite'}"
    result = tune_problem(PROBLEM, n_trials=n_trials, db_url=db, env=env(), measure=measure, build=no_build,
                          jobs=1, seed=0, warm_start=4, retime_top=top, retime_rounds=rounds)
    assert result.best_config is not None
    assert len(calls) == top * rounds
    firsts = [calls[r * top] for r in range(rounds)]
    assert len(set(firsts)) == top, "each config leads one round"
    truth = {c: fake_measure(type(result.best_config)(*c))["p50_ms"] for c in set(calls)}
    assert tuple(result.best_config.to_record().values()) == min(truth, key=truth.get)
    assert abs(result.best_ms - min(truth.values())) < 1e-12  # its median round: not the boosted one
    retimed = [m for _, m in Store(db).measurements() if m.study.endswith(":retime")]
    assert len(retimed) == top and all(m.iterations == 50 * rounds for m in retimed)

"""A small DSO-style model of a config's energy: ridge regression (numpy only) of log average power on
static features (tile shape, stages, cluster, schedule, scheduler, registers, shared memory, wave
quantization) and measured metrics (log time, achieved fraction of the FLOP/s and bytes/s ceilings).

Energy per call is predicted as power x time, so the model's job is the part time does not explain.
Before anything is measured, :func:`rank` uses the roofline estimate for time (warm start of energy tuning).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..families.perfmodel import BANDWIDTH, SPARSE_FLOPS, estimate_ms

FEATURES = ("log_time", "flops_frac", "bytes_frac", "log2_tile_m", "log2_tile_n", "log2_tile_k", "stages",
            "auto_stages", "cluster", "pingpong", "streamk", "wave_eff", "regs", "smem")


@dataclass(frozen=True)
class Sample:
    """One measured (or to-be-predicted) point: problem, config record, time, optional resources and energy."""

    m: int
    n: int
    k: int
    config: dict
    time_ms: float
    joules: float | None = None
    regs: int = 0
    smem: int = 0


def features(s: Sample, sm_count: int = 132) -> list[float]:
    c = s.config
    t = s.time_ms * 1e-3
    flops = 2.0 * s.m * s.n * s.k / 2  # nonzero multiply-adds at 2:4
    traffic = s.m * s.k * 2 + s.n * s.k * (1 + 1 / 8) + s.m * s.n * 2
    tile_m, tile_n, tile_k = c.get("tile_m", 128), c.get("tile_n", 128), c.get("tile_k", 64)
    cluster = c.get("cluster_m", 1) * c.get("cluster_n", 1)
    tiles = math.ceil(s.n / tile_m) * math.ceil(s.m / tile_n)
    wave_eff = tiles / (math.ceil(tiles / sm_count) * sm_count)
    return [math.log(s.time_ms), flops / t / (SPARSE_FLOPS / 2), traffic / t / BANDWIDTH, math.log2(tile_m),
            math.log2(tile_n), math.log2(tile_k), float(c.get("stages", 0)), float(c.get("stages", 0) == 0),
            float(cluster), float(c.get("schedule") == "pingpong"), float(c.get("scheduler") == "streamk"),
            wave_eff, s.regs / 255.0, s.smem / 232448.0]


@dataclass(frozen=True)
class EnergyModel:
    """Ridge regression on standardized features; predicts average watts, and joules = watts x time."""

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray  # bias first
    lam: float

    @classmethod
    def fit(cls, samples: Sequence[Sample], lam: float = 1.0) -> EnergyModel:
        if len(samples) < 3:
            raise ValueError(f"need at least 3 samples with energy, got {len(samples)}")
        x = np.array([features(s) for s in samples])
        y = np.log(np.array([s.joules / (s.time_ms * 1e-3) for s in samples]))  # log watts
        mean, scale = x.mean(0), x.std(0)
        scale[scale == 0] = 1.0
        z = np.hstack([np.ones((len(x), 1)), (x - mean) / scale])
        reg = lam * np.eye(z.shape[1])
        reg[0, 0] = 0.0  # the intercept is not shrunk
        w = np.linalg.solve(z.T @ z + reg, z.T @ y)
        return cls(mean, scale, w, lam)

    def watts(self, samples: Sequence[Sample]) -> np.ndarray:
        x = np.array([features(s) for s in samples])
        z = np.hstack([np.ones((len(x), 1)), (x - self.mean) / self.scale])
        return np.exp(z @ self.weights)

    def joules(self, samples: Sequence[Sample]) -> np.ndarray:
        return self.watts(samples) * np.array([s.time_ms * 1e-3 for s in samples])


def kfold_error(samples: Sequence[Sample], folds: int = 5, lam: float = 1.0, seed: int = 0) -> dict:
    """Held-out error of predicted joules per call: mean and median absolute % error, against a constant-power
    baseline (mean watts of the training folds x time), and how often the held-out fold's energy-best config is
    the predicted best within its problem."""
    samples = list(samples)
    order = np.random.default_rng(seed).permutation(len(samples))
    errs, base = np.zeros(len(samples)), np.zeros(len(samples))
    pred = np.zeros(len(samples))
    for f in range(folds):
        test = order[f::folds]
        train = [samples[i] for i in order if i not in set(test)]
        model = EnergyModel.fit(train, lam)
        held = [samples[i] for i in test]
        truth = np.array([s.joules for s in held])
        pred[test] = model.joules(held)
        errs[test] = np.abs(pred[test] / truth - 1)
        watts = np.mean([s.joules / (s.time_ms * 1e-3) for s in train])
        base[test] = np.abs(np.array([watts * s.time_ms * 1e-3 for s in held]) / truth - 1)
    return {"folds": folds, "samples": len(samples), "mape_pct": float(errs.mean() * 100),
            "median_ape_pct": float(np.median(errs) * 100), "baseline_const_power_mape_pct": float(base.mean() * 100),
            "baseline_const_power_median_ape_pct": float(np.median(base) * 100)}


def rank(model: EnergyModel, configs: Sequence[Any], problem: Any, objective: str = "energy",
         sm_count: int = 132) -> list[Any]:
    """Configs ordered by predicted energy (or energy x time for ``edp``), time from the roofline estimate."""
    samples = [Sample(problem.m, problem.n, problem.k, c.to_record(), estimate_ms(c, problem, sm_count))
               for c in configs]
    if not samples:
        return []
    joules = model.joules(samples)
    score = joules * np.array([s.time_ms for s in samples]) if objective == "edp" else joules
    return [configs[i] for i in np.argsort(score, kind="stable")]

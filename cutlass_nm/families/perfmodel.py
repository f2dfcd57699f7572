"""A roofline model of the sm90 2:4 family, NM-SpMM style, to rank configs before measuring any.

time ≈ max(waves x per-tile MMA time, bytes / bandwidth) x a pipeline-depth penalty, where waves
are the CTA tiles quantized over the SMs (divided by the cluster size they occupy together).
Rates are this project's measured H100 ceilings: 700 TFLOP/s dense fp16 (so 1400 for 2:4) and
3.0 TB/s copy bandwidth.
"""

from __future__ import annotations

import math
from typing import Any

from ..arch import HOPPER

SPARSE_FLOPS = HOPPER.sparse_flops
BANDWIDTH = HOPPER.bandwidth
L2_BANDWIDTH = HOPPER.l2_bandwidth
DENSE_FLOPS = HOPPER.dense_flops  # tensor cores, fp16/bf16, nonzero multiply-adds
SIMT_FLOPS = HOPPER.simt_flops


def estimate_ms(cfg: Any, problem: Any, sm_count: int = 132) -> float:
    """Estimated time of one launch in ms (for ranking only); a config with its own model (every family but the
    2:4 ones) uses it."""
    if (own := cfg.estimate_ms(problem, sm_count)) is not None:
        return own
    m, n, k = problem.m, problem.n, problem.k
    tiles_m, tiles_n = math.ceil(n / cfg.tile_m), math.ceil(m / cfg.tile_n)
    tiles = tiles_m * tiles_n
    waves = math.ceil(tiles / sm_count)
    per_tile = 2.0 * cfg.tile_m * cfg.tile_n * k / (SPARSE_FLOPS / sm_count)
    # A (half of k, plus metadata) is read once per column of tiles, B once per row; clusters share loads.
    a_bytes = n * k * (1 + 1 / 8) * tiles_n / max(1, getattr(cfg, "cluster_n", 1))  # sm80: no clusters
    b_bytes = m * k * 2 * tiles_m / max(1, getattr(cfg, "cluster_m", 1))
    out_bytes = m * n * (4 if problem.types.out_dtype == "f32" else 2)
    mem = (a_bytes + b_bytes + out_bytes) / BANDWIDTH
    depth_penalty = 1.0 + 8.0 / (k / cfg.tile_k + 8)  # short K loops expose pipeline fill
    schedule = 1.0 if getattr(cfg, "schedule", "cooperative") == "cooperative" else 1.03
    return max(waves * per_tile, mem) * depth_penalty * schedule * 1e3


def rank(configs: list[Any], problem: Any, sm_count: int = 132) -> list[Any]:
    """Configs sorted by estimated time, fastest first."""
    return sorted(configs, key=lambda c: estimate_ms(c, problem, sm_count))

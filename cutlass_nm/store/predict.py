"""The config model: a config for a problem nobody tuned, predicted from the tuned problems nearest to it.

Neighbours are the tuned problems of the same family, pattern and input dtype, nearest by a feature distance over
log2 m (bucket), log2 n, log2 k and log2 of the CTA waves a 128 x 128 tile makes over the SMs. Each neighbour's
winning config is a candidate; its time on the new problem is predicted from its measured time on the neighbour,
scaled by the roofline (``families.perfmodel.estimate_ms``: CTA waves of the config's own tiles, with the tile
quantization of m, n and k, against the bytes moved): t(c, new) = t(c, neighbour) x est(c, new) / est(c, neighbour).
The candidate with the least predicted time that the family can run wins.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ..families import Family, Problem
from ..families.perfmodel import estimate_ms
from .fingerprint import ProblemKey
from .shipped import Tuned

NEIGHBOURS = 8  # tuned problems whose winners compete
REF_TILE = 128


def _waves(m: int, n: int, sm_count: int) -> float:
    return math.ceil(math.ceil(n / REF_TILE) * math.ceil(m / REF_TILE) / sm_count)


def distance(a: ProblemKey, b: ProblemKey, sm_count: int) -> float:
    """Feature distance between two problem keys (same family assumed)."""
    logs = sum(abs(math.log2(x / y)) for x, y in ((a.m_bucket, b.m_bucket), (a.n, b.n), (a.k, b.k)))
    return logs + abs(math.log2(_waves(a.m_bucket, a.n, sm_count) / _waves(b.m_bucket, b.n, sm_count)))


def _problem_of(key: ProblemKey, like: Problem) -> Problem:
    return replace(like, m=key.m_bucket, n=key.n, k=key.k)


def predict(family: Family, problem: Problem, tuned: dict[ProblemKey, Tuned], sm_count: int) -> Any:
    """The predicted best config for ``problem`` from ``tuned`` winners (None: no tuned neighbour runs it)."""
    key = ProblemKey.of(family.name, problem)
    same = [k for k in tuned if (k.family, k.pattern, k.dtype) == (key.family, key.pattern, key.dtype)]
    if not same:
        return None
    exact_types = [k for k in same if (k.out_dtype, k.bias) == (key.out_dtype, key.bias)]
    near = sorted(exact_types or same, key=lambda k: distance(k, key, sm_count))[:NEIGHBOURS]
    best, best_t = None, math.inf
    for k in near:
        cfg, measured = tuned[k].config, tuned[k].p50_ms
        if family.check(cfg, problem) is not None:
            continue
        est_there = estimate_ms(cfg, _problem_of(k, problem), sm_count)
        t = measured * estimate_ms(cfg, problem, sm_count) / est_there if est_there > 0 else math.inf
        if t < best_t:
            best, best_t = cfg, t
    return best

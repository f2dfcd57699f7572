"""The config model: a config for a problem nobody tuned, predicted from the tuned problem nearest to it.

Nearest by a feature distance over log2 of m (its bucket), n and k and of the CTA waves a 128 x 128 tile makes
over the SMs (tile quantization and waves together); the nearest tuned problem of the same family and input dtype
(the same pattern first, else a V:N:M pattern of the same V; then the same output dtype and bias) whose winning
config this family can run gives its config.

Validated leave-one-model-out on the shipping grid (each tune model's problems predicted from the other models'
winners, every candidate measured): see docs/decisions/dispatch.md.
"""

from __future__ import annotations

import math
from typing import Any

from ..families import Family, Problem
from ..patterns import parse_or_none
from .fingerprint import ProblemKey
from .shipped import Tuned

REF_TILE = 128


def _waves(m: int, n: int, sm_count: int) -> float:
    return math.ceil(math.ceil(n / REF_TILE) * math.ceil(m / REF_TILE) / sm_count)


def distance(a: ProblemKey, b: ProblemKey, sm_count: int) -> float:
    """Feature distance between two problem keys (same family assumed)."""
    logs = sum(abs(math.log2(x / y)) for x, y in ((a.m_bucket, b.m_bucket), (a.n, b.n), (a.k, b.k)))
    return logs + abs(math.log2(_waves(a.m_bucket, a.n, sm_count) / _waves(b.m_bucket, b.n, sm_count)))


def _kin(a: str, b: str) -> bool:
    """Whether a winner tuned for pattern ``a`` may stand for pattern ``b``: the same pattern, or V:N:M patterns of
    the same V (their kernels differ only in the gathered K; an N:M kernel's best config depends on N and M)."""
    if a == b:
        return True
    pa, pb = parse_or_none(a), parse_or_none(b)
    return pa is not None and pb is not None and pa.is_vnm and pb.is_vnm and pa.v == pb.v


def predict(family: Family, problem: Problem, tuned: dict[ProblemKey, Tuned], sm_count: int) -> Any:
    """The predicted config for ``problem`` from ``tuned`` winners (None: no tuned problem's config runs it)."""
    key = ProblemKey.of(family.name, problem)

    def order(k: ProblemKey) -> tuple[bool, bool, float]:
        return k.pattern != key.pattern, (k.out_dtype, k.bias) != (key.out_dtype, key.bias), distance(k, key, sm_count)

    same = [k for k in tuned if (k.family, k.dtype) == (key.family, key.dtype) and _kin(k.pattern, key.pattern)]
    for k in sorted(same, key=order):
        if family.check(tuned[k].config, problem) is None:
            return tuned[k].config
    return None

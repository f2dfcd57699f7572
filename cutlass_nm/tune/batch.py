"""Tune a list of problems, in this process or on several GPUs at once."""

from __future__ import annotations

from typing import Any

from ..families import KernelTypes, Problem
from .gpus import tune_on_gpus
from .tuner import TuneResult, tune_problem


def tune(problems: list[tuple[int, int, int]], *, dtype: str = "f16", bias: bool = False,
         gpus: list[int] | None = None, **kwargs: Any) -> list[TuneResult] | list[list[dict]]:
    """Tune several (m, n, k) problems in turn; kwargs (``objective=`` included) go to :func:`tune_problem`.
    With ``gpus``, each problem is tuned by one process per GPU on a shared study (:func:`tune.gpus.tune_on_gpus`,
    which takes ``family``, ``n_trials``, ``timeout_s``, ``storage``, ``db_url``, ``fixed``, ``objective``) and
    the per-GPU summaries are returned."""
    types = KernelTypes(dtype, dtype, bias)
    if gpus:
        kwargs.setdefault("family", "sptc24_sm90")
        return [tune_on_gpus(Problem(m, n, k, types), gpus, **kwargs) for m, n, k in problems]
    return [tune_problem(Problem(m, n, k, types), **kwargs) for m, n, k in problems]

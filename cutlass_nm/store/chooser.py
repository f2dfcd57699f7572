"""Where dispatch's config comes from, in order: the user's tuning DB (this exact problem), the configs shipped
in the package (this exact problem), the config model (nearest tuned problems of either), else the family's
heuristic. Each answer names its source: ``user``, ``shipped``, ``model`` or ``heuristic``."""

from __future__ import annotations

import logging
import os
from typing import Any, NamedTuple

from ..families import Family, Problem
from .fingerprint import ProblemKey
from .lookup import TunedSelector
from .predict import predict
from .shipped import Tuned, shipped_table

log = logging.getLogger("cutlass_nm.store")
SOURCES = ("user", "shipped", "model", "heuristic")


class Choice(NamedTuple):
    """A config and where it came from (one of ``SOURCES``)."""

    config: Any
    source: str


class DefaultChooser:
    """A ``dispatch.Selector``: ``user`` (a ``TunedSelector`` or None), then the shipped configs of the GPU that
    ``machine`` describes (``fingerprint._machine``'s fields; None: no shipped configs), then the model."""

    def __init__(self, user: Any = None, machine: dict[str, Any] | None = None, shipped: bool = True) -> None:
        self.user = user
        self.machine = machine
        self.use_shipped = shipped
        self._shipped: dict[ProblemKey, Tuned] | None = None
        self._memo: dict[tuple[str, Problem], Choice | None] = {}

    def shipped(self) -> dict[ProblemKey, Tuned]:
        """This GPU's shipped winners (read once)."""
        if self._shipped is None:
            self._shipped = {}
            if self.use_shipped and (self.machine is not None or _has_gpu()):
                try:
                    self._shipped = shipped_table(self._machine())
                except Exception as exc:  # no GPU to describe, or a broken package file: no shipped configs
                    log.warning("cutlass_nm: shipped configs unusable (%s: %s)", type(exc).__name__, exc)
        return self._shipped

    def _machine(self) -> dict[str, Any]:
        if self.machine is None:
            from .fingerprint import _machine

            self.machine = _machine(0)
        return self.machine

    def __call__(self, family: Family, problem: Problem) -> Choice | None:
        memo_key = (family.name, problem)
        if memo_key not in self._memo:
            self._memo[memo_key] = self._choose(family, problem)
        return self._memo[memo_key]

    def _choose(self, family: Family, problem: Problem) -> Choice | None:
        if self.user is not None and (cfg := self.user.exact(family, problem)) is not None:
            return Choice(cfg, "user")
        shipped = self.shipped()
        hit = shipped.get(ProblemKey.of(family.name, problem))
        if hit is not None:
            return Choice(hit.config, "shipped")
        tuned = {**shipped, **(self.user.tuned() if self.user is not None else {})}
        cfg = predict(family, problem, tuned, int(self._machine().get("sm_count", 132))) if tuned else None
        return Choice(cfg, "model") if cfg is not None else None


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def env_off(variable: str) -> bool:
    """Whether ``$variable`` switches its source off ("off", "none" or "0")."""
    return os.environ.get(variable, "").lower() in ("off", "none", "0")


def default_chooser(url: str | None = None, *, db: bool | None = None, objective: str | None = None,
                    quiet_if_missing: bool = True) -> DefaultChooser:
    """The chooser over the tuning DB at ``url`` (default ``$CUTLASS_NM_DB`` / the user cache) and the shipped
    configs. ``db``: use the DB (None: unless ``CUTLASS_NM_DB=off``); ``CUTLASS_NM_SHIPPED=off`` drops the shipped
    configs. ``objective`` and ``quiet_if_missing`` go to the DB's ``TunedSelector``."""
    use_db = not env_off("CUTLASS_NM_DB") if db is None else db
    user = TunedSelector(url, objective=objective, quiet_if_missing=quiet_if_missing) if use_db else None
    return DefaultChooser(user, shipped=not env_off("CUTLASS_NM_SHIPPED"))

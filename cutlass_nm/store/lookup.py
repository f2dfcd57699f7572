"""Dispatch-time lookup: tuned winners for this GPU, with fallbacks; never breaks ``matmul``.

The database is opened read-only (never created, migrated or switched to WAL) with bounded waits
(``$CUTLASS_NM_DB_TIMEOUT``, at most 0.5 s on a writer's lock): an unreachable, slow, locked, corrupt or foreign
database gives one warning and the heuristic configs; a malformed winner row is skipped with one warning.

Order: exact key -> same environment, nearest m bucket (then nearest n, k) -> an environment that
differs only in soft fields (driver, torch), with one warning -> ``None`` (the family's heuristic).
The winners of this machine's hard environment (per family: each family's templates have their own hash)
are read once, on the first lookup; answers are memoized per problem, so a repeated lookup is one dict access.

Policy: winners by time unless the ``objective`` argument or ``$CUTLASS_NM_OBJECTIVE`` says "energy" or "edp";
a problem with no winner under that objective at its shape or a near one (never measured with energy) gets its
time winner. An unknown value in the environment variable warns and means "time" (dispatch never breaks).
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from typing import Any

from ..families import Family, Problem
from .fingerprint import EnvFields, ProblemKey, current_environment
from .shipped import Tuned
from .validate import RecordError, validate_config, validate_problem

log = logging.getLogger("cutlass_nm.store")
_SHAPE_FREE = ("family", "pattern", "dtype", "out_dtype", "layout", "bias", "alignment")
POLICIES = ("time", "energy", "edp")


def dispatch_objective(objective: str | None = None) -> str:
    """The objective dispatch follows: the argument, else ``$CUTLASS_NM_OBJECTIVE``, else "time"."""
    if objective is not None:
        if objective not in POLICIES:
            from ..errors import InputError

            raise InputError(f"objective {objective!r} is not one of {POLICIES}")
        return objective
    value = os.environ.get("CUTLASS_NM_OBJECTIVE", "").strip().lower() or "time"
    if value not in POLICIES:
        warnings.warn(f"cutlass_nm: CUTLASS_NM_OBJECTIVE={value!r} is not one of {POLICIES}; using 'time'",
                      RuntimeWarning, stacklevel=2)
        return "time"
    return value


class TunedSelector:
    """A ``dispatch.Selector`` backed by a tuning database (install with ``cutlass_nm.use_tuning_db``)."""

    def __init__(self, url: str | None = None, env: EnvFields | None = None, quiet_if_missing: bool = False,
                 objective: str | None = None) -> None:
        """``env`` pins the fingerprint (tests); by default each family's is ``current_environment(family)``.
        ``objective``: see :func:`dispatch_objective` (read once, here)."""
        self.url = url
        self.objective = dispatch_objective(objective)
        self.quiet_if_missing = quiet_if_missing  # no DB file yet is normal before any tuning
        self._env = env
        self._table: dict[ProblemKey, tuple[Any, bool]] | None = None  # key -> (config, same soft env); by time
        self._by_objective: dict[ProblemKey, tuple[Any, bool]] = {}  # the same under an energy objective
        self._memo: dict[tuple[str, Problem], Any] = {}
        self._times: dict[ProblemKey, float] = {}  # the time winners' medians
        self._warned: set[str] = set()

    def __call__(self, family: Family, problem: Problem) -> Any:
        memo_key = (family.name, problem)
        if memo_key in self._memo:
            return self._memo[memo_key]
        table = self._load()
        key = ProblemKey.of(family.name, problem)
        cfg = self._choose(self._by_objective, key) if self._by_objective else None
        if cfg is None and table:
            cfg = self._choose(table, key)
        self._memo[memo_key] = cfg
        return cfg

    def exact(self, family: Family, problem: Problem) -> Any:
        """The winner tuned for exactly this problem's key (the objective's, else the time winner), or None."""
        table = self._load()
        key = ProblemKey.of(family.name, problem)
        hit = self._by_objective.get(key) or table.get(key)
        if hit is None:
            return None
        return self._choose({key: hit}, key)

    def tuned(self) -> dict[ProblemKey, Tuned]:
        """Every usable time winner of this database with its median time (what the config model learns from)."""
        table = self._load()
        return {k: Tuned(cfg, self._times[k]) for k, (cfg, _) in table.items() if k in self._times}

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def _load(self) -> dict[ProblemKey, tuple[Any, bool]]:
        if self._table is not None:
            return self._table
        self._table = {}
        from .db import MissingDatabase, default_url, redact
        from .store import Store

        url = self.url or default_url()
        store = None
        try:
            from ..families import FAMILIES

            store = Store(url, read_only=True)  # never creates, migrates or changes the file
            envs = {name: self._env or current_environment(name) for name in FAMILIES}
            hard_keys = {e.hard_key for e in envs.values()}
            rows = [row for key in hard_keys for row in store.winners(hard_key=key)]
            by_objective = [] if self.objective == "time" else [
                row for key in hard_keys for row in store.winners(hard_key=key, objective=self.objective)]
        except Exception as exc:  # missing, unreachable, locked, corrupt, foreign or too slow: fall back, once
            if self.quiet_if_missing and isinstance(exc, MissingDatabase):  # normal before any tuning
                return self._table
            self._warn_once("db", f"cutlass_nm: tuning DB {redact(url)} unusable "
                                  f"({exc.__class__.__name__}: {str(exc)[:200]}); using heuristic configs")
            return self._table
        finally:
            if store is not None:
                store.engine.dispose()  # read once: no connection stays open
        rejected: list[str] = []
        self._table = self._tabulate(rows, envs, rejected, self._times)
        if by_objective:
            self._by_objective = self._tabulate(by_objective, envs, rejected)
        if rejected:
            self._warn_once("rows", f"cutlass_nm: skipped {len(rejected)} malformed winner row(s) of tuning DB "
                                    f"{redact(url)} ({rejected[0]}); the other winners are used")
        return self._table

    @staticmethod
    def _tabulate(rows: list, envs: dict[str, EnvFields], rejected: list[str],
                  times: dict[ProblemKey, float] | None = None) -> dict[ProblemKey, tuple[Any, bool]]:
        """The usable winners by problem; each malformed row is skipped, its reason appended to ``rejected``;
        ``times`` gets each kept winner's median."""
        table: dict[ProblemKey, tuple[Any, bool]] = {}
        for env_row, w in rows:
            try:
                key = validate_problem({c: getattr(w, c) for c in ProblemKey.__dataclass_fields__})
                cfg = validate_config(key.family, w.config)
            except RecordError as exc:
                log.debug("winner %s rejected: %s", w.id, exc)
                rejected.append(f"winner {w.id}: {str(exc)[:120]}")
                continue
            env = envs.get(key.family)
            if env is None or env_row.hard_key != env.hard_key:  # measured with another family's templates
                continue
            same_soft = env_row.soft_key == env.soft_key
            if key not in table or same_soft:
                table[key] = (cfg, same_soft)
                if times is not None and isinstance(w.p50_ms, float | int) and w.p50_ms > 0:
                    times[key] = float(w.p50_ms)
        return table

    def _choose(self, table: dict[ProblemKey, tuple[Any, bool]], key: ProblemKey) -> Any:
        hit = table.get(key)
        if hit is None:
            fixed = tuple(getattr(key, f) for f in _SHAPE_FREE)
            near = [k for k in table if tuple(getattr(k, f) for f in _SHAPE_FREE) == fixed]
            if not near:
                return None

            def distance(k: ProblemKey) -> tuple[float, float, float]:
                return (abs(math.log2(k.m_bucket / key.m_bucket)), abs(math.log2(k.n / key.n)),
                        abs(math.log2(k.k / key.k)))

            same_env = [k for k in near if table[k][1]]
            hit = table[min(same_env or near, key=distance)]
        cfg, same_soft = hit
        if not same_soft:
            self._warn_once("soft", "cutlass_nm: using tuning records from a different driver/torch version "
                                    "(same GPU and toolchain); re-tune to silence this")
        return cfg

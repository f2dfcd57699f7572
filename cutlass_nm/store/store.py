"""The tuning store: record measurements, keep the fastest per problem, export/import/merge as JSONL."""

from __future__ import annotations

import datetime
import json
import logging
import socket
import uuid
from collections.abc import Collection, Iterable, Iterator
from typing import IO, Any

from sqlalchemy import Engine, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .db import is_current, make_engine, upgrade
from .fingerprint import EnvFields, ProblemKey, all_template_hashes
from .schema import Claim, Environment, Measurement, Winner
from .validate import RecordError, validate_measurement

log = logging.getLogger("cutlass_nm.store")
FORMAT = "cutlass_nm.tuning/1"
PROBLEM_COLUMNS = ("family", "pattern", "m_bucket", "n", "k", "dtype", "out_dtype", "layout", "bias", "alignment")
ENERGY_COLUMNS = ("joules", "avg_power_w", "sm_clock_mhz")
OBJECTIVES = ("time", "energy", "edp")  # a winner is kept for each; "pareto" tuning feeds all three


def objective_score(objective: str, p50_ms: float, joules: float | None) -> float | None:
    """What ``objective`` minimizes: ms, joules per call, or joules x ms (energy-delay); None without energy."""
    if objective == "time":
        return p50_ms
    if joules is None:
        return None
    return joules if objective == "energy" else joules * p50_ms


class Store:
    """A tuning database at ``url`` (default: ``$CUTLASS_NM_DB`` or SQLite in the user cache dir)."""

    def __init__(self, url: str | None = None, *, create: bool = True) -> None:
        self.engine: Engine = make_engine(url)
        self.url = self.engine.url.render_as_string(hide_password=True)
        if create and not is_current(self.engine):
            upgrade(self.engine)
        self._env_ids: dict[tuple[str, str], int] = {}

    def _insert(self, table):
        return (pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert)(table)

    # -- environments -------------------------------------------------------------------------
    def environment_id(self, env: EnvFields) -> int:
        """Get or create the row of ``env`` (race-safe across processes)."""
        key = (env.hard_key, env.soft_key)
        if key in self._env_ids:
            return self._env_ids[key]
        with self.engine.begin() as conn:
            conn.execute(self._insert(Environment).values(hard_key=env.hard_key, soft_key=env.soft_key,
                                                          **env.to_dict()).on_conflict_do_nothing())
            env_id = conn.execute(select(Environment.id).where(Environment.hard_key == env.hard_key,
                                                               Environment.soft_key == env.soft_key)).scalar_one()
        self._env_ids[key] = env_id
        return env_id

    # -- writing ------------------------------------------------------------------------------
    def record(self, env: EnvFields, key: ProblemKey, m: int, config: Any, status: str = "ok", *,
               p20_ms: float | None = None, p50_ms: float | None = None, p80_ms: float | None = None,
               iterations: int = 0, study: str | None = None, trial: int | None = None,
               host: str | None = None, uid: str | None = None, created_at: str | None = None,
               joules: float | None = None, avg_power_w: float | None = None, sm_clock_mhz: float | None = None
               ) -> str:
        """Store one measurement (any status) and, where it is the best ok one for its problem under an objective
        (time; with energy also energy and EDP), that objective's winner."""
        rec = {**key.to_dict(), "environment": env.to_dict(), "m": m, "config": config.to_record(),
               "status": status, "p20_ms": p20_ms, "p50_ms": p50_ms, "p80_ms": p80_ms, "iterations": iterations,
               "joules": joules, "avg_power_w": avg_power_w, "sm_clock_mhz": sm_clock_mhz,
               "study": study, "trial": trial, "host": host or socket.gethostname(), "uid": uid or str(uuid.uuid4()),
               "created_at": created_at or datetime.datetime.now(datetime.timezone.utc).isoformat()}
        self._write([validate_measurement(rec)])
        return rec["uid"]

    def _write(self, records: list[dict]) -> int:
        """Insert validated records (skipping known uids) and update winners; returns how many were new."""
        new = 0
        for r in records:
            env_id = self.environment_id(r["environment"])
            key = r["key"].to_dict()
            cfg = r["config"].to_record()
            with self.engine.begin() as conn:
                res = conn.execute(self._insert(Measurement).values(
                    uid=r["uid"], environment_id=env_id, **key, m=r["m"], config=cfg,
                    config_key=json.dumps(cfg, sort_keys=True), status=r["status"], p20_ms=r["p20_ms"],
                    p50_ms=r["p50_ms"], p80_ms=r["p80_ms"], iterations=r["iterations"], host=r["host"],
                    study=r["study"], trial=r["trial"], **{c: r.get(c) for c in ENERGY_COLUMNS},
                    created_at=datetime.datetime.fromisoformat(r["created_at"]))
                    .on_conflict_do_nothing().returning(Measurement.id))
                new += len(res.fetchall())  # rowcount is not portable for ON CONFLICT DO NOTHING
                for objective in OBJECTIVES if r["status"] == "ok" else ():
                    score = objective_score(objective, r["p50_ms"], r.get("joules"))
                    if score is None:
                        continue
                    ins = self._insert(Winner).values(environment_id=env_id, **key, config=cfg, p50_ms=r["p50_ms"],
                                                      objective=objective, score=score, measurement_uid=r["uid"])
                    conn.execute(ins.on_conflict_do_update(
                        index_elements=["environment_id", *PROBLEM_COLUMNS, "objective"],
                        set_={"config": ins.excluded.config, "p50_ms": ins.excluded.p50_ms,
                              "score": ins.excluded.score, "measurement_uid": ins.excluded.measurement_uid},
                        where=Winner.score > ins.excluded.score))
        return new

    def claim(self, study: str, config: Any) -> bool:
        """Claim ``config`` for measurement in ``study``; False if another tuner already has it."""
        key = json.dumps(config.to_record(), sort_keys=True)
        with self.engine.begin() as conn:
            res = conn.execute(self._insert(Claim).values(
                study=study, config_key=key, host=socket.gethostname(),
                created_at=datetime.datetime.now(datetime.timezone.utc)).on_conflict_do_nothing().returning(Claim.id))
            return bool(res.fetchall())

    # -- reading ------------------------------------------------------------------------------
    def winners(self, hard_key: str | None = None, objective: str = "time") -> list[tuple[Environment, Winner]]:
        """Winners under ``objective`` (time by default), optionally of one hard environment. A database not yet
        upgraded to 0003 (opened with ``create=False``) has time winners only."""
        if not is_current(self.engine):
            return self._old_winners(hard_key) if objective == "time" else []
        with Session(self.engine) as s:
            q = select(Environment, Winner).join(Winner, Winner.environment_id == Environment.id)
            q = q.where(Winner.objective == objective)
            if hard_key:
                q = q.where(Environment.hard_key == hard_key)
            return [(e, w) for e, w in s.execute(q).all()]

    def _old_winners(self, hard_key: str | None) -> list[tuple[Environment, Any]]:
        """Winners of a pre-0003 schema, read without the columns it lacks."""
        from sqlalchemy import MetaData, Table

        table = Table("winners", MetaData(), autoload_with=self.engine)
        with Session(self.engine) as s:
            q = select(Environment, table).join(table, table.c.environment_id == Environment.id)
            if hard_key:
                q = q.where(Environment.hard_key == hard_key)
            return [(row[0], row) for row in s.execute(q).all()]

    def measurements(self, **filters: Any) -> list[tuple[Environment, Measurement]]:
        with Session(self.engine) as s:
            q = select(Environment, Measurement).join(Measurement, Measurement.environment_id == Environment.id)
            for col, val in filters.items():
                q = q.where(getattr(Measurement, col) == val)
            return [(e, m) for e, m in s.execute(q.order_by(Measurement.id)).all()]

    def count(self) -> int:
        with Session(self.engine) as s:
            return s.query(Measurement).count()

    # -- exchange -----------------------------------------------------------------------------
    def export(self, out: IO[str]) -> int:
        """Write a metadata header line, then one JSON line per measurement."""
        rows = self.measurements()
        out.write(json.dumps({"format": FORMAT, "exported_at": datetime.datetime.now(datetime.timezone.utc)
                              .isoformat(), "source": self.url, "records": len(rows)}) + "\n")
        for env, m in rows:
            env_fields = EnvFields(**{f: getattr(env, f) for f in EnvFields.__dataclass_fields__})
            rec = {c: getattr(m, c) for c in PROBLEM_COLUMNS}
            rec.update(environment=env_fields.to_dict(), hard_key=env.hard_key, m=m.m, config=m.config,
                       status=m.status, p20_ms=m.p20_ms, p50_ms=m.p50_ms, p80_ms=m.p80_ms, iterations=m.iterations,
                       host=m.host, study=m.study, trial=m.trial, uid=m.uid, created_at=m.created_at.isoformat())
            rec.update({c: getattr(m, c) for c in ENERGY_COLUMNS if getattr(m, c) is not None})
            out.write(json.dumps(rec) + "\n")
        return len(rows)

    def merge(self, lines: Iterable[str], only_hard_keys: Collection[str] | None = None) -> dict[str, int]:
        """Import exported records: idempotent (known uids are skipped), winners keep the fastest.

        Records that fail validation are rejected with a logged reason; with ``only_hard_keys``, records of
        other hard environments are skipped.
        """
        stats = {"new": 0, "known": 0, "rejected": 0, "skipped_env": 0}
        good = []
        for i, rec in enumerate(_records(lines)):
            try:
                r = validate_measurement(rec)
            except RecordError as exc:
                log.warning("record %d rejected: %s", i, exc)
                stats["rejected"] += 1
                continue
            if only_hard_keys is not None and r["environment"].hard_key not in only_hard_keys:
                stats["skipped_env"] += 1
                continue
            good.append(r)
        try:
            stats["new"] = self._write(good)
        except IntegrityError as exc:  # pragma: no cover - a racing writer; the retry finds the uids known
            log.warning("merge raced another writer (%s); retrying", exc.__class__.__name__)
            stats["new"] = self._write(good)
        stats["known"] = len(good) - stats["new"]
        return stats

    def gc(self, dry_run: bool = False) -> int:
        """Delete environments built from templates no family of this version has (their records can never be
        used again)."""
        with Session(self.engine) as s:
            current = all_template_hashes()
            stale = [e.id for e in s.scalars(select(Environment).where(Environment.template_hash.not_in(current)))]
            n = s.query(Measurement).filter(Measurement.environment_id.in_(stale)).count()
            if not dry_run and stale:
                s.execute(delete(Winner).where(Winner.environment_id.in_(stale)))
                s.execute(delete(Measurement).where(Measurement.environment_id.in_(stale)))
                s.execute(delete(Environment).where(Environment.id.in_(stale)))
                s.commit()
            return n


def _records(lines: Iterable[str]) -> Iterator[Any]:
    it = iter(lines)
    header = next(it, None)
    if header is None:
        return
    try:
        meta = json.loads(header)
    except json.JSONDecodeError:
        raise RecordError("first line is not a JSON header") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise RecordError(f"not a {FORMAT} export (header: {str(meta)[:80]})")
    for line in it:
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                yield None  # rejected by validation, counted

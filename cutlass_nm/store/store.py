"""The tuning store: record measurements, keep the fastest per problem, export/import/merge as JSONL."""

from __future__ import annotations

import datetime
import json
import logging
import socket
import uuid
from collections.abc import Collection, Iterable, Iterator
from typing import IO, Any

from sqlalchemy import Connection, Engine, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..errors import StoreError
from .db import is_current, make_engine, mark, schema_state, upgrade
from .fingerprint import EnvFields, ProblemKey, all_template_hashes
from .schema import Claim, Environment, Measurement, Winner
from .validate import RecordError, validate_measurement

log = logging.getLogger("cutlass_nm.store")
FORMAT = "cutlass_nm.tuning/1"
PROBLEM_COLUMNS = ("family", "pattern", "m_bucket", "n", "k", "dtype", "out_dtype", "layout", "bias", "alignment")
ENERGY_COLUMNS = ("joules", "avg_power_w", "sm_clock_mhz")
MAX_LINE = 64 * 1024  # a record is ~1 kB
MAX_DEPTH = 3  # record -> environment / config -> values
OBJECTIVES = ("time", "energy", "edp")  # a winner is kept for each; "pareto" tuning feeds all three


def objective_score(objective: str, p50_ms: float, joules: float | None) -> float | None:
    """What ``objective`` minimizes: ms, joules per call, or joules x ms (energy-delay); None without energy."""
    if objective == "time":
        return p50_ms
    if joules is None:
        return None
    return joules if objective == "energy" else joules * p50_ms


class ImportRejected(StoreError):
    """An import in which some records failed validation: nothing was written. ``rejects``: (line, reason)."""

    def __init__(self, source: str, rejects: list[tuple[int, str]], total: int) -> None:
        self.source, self.rejects, self.total = source, rejects, total
        shown = "; ".join(f"line {line}: {reason}" for line, reason in rejects[:3])
        more = f"; and {len(rejects) - 3} more" if len(rejects) > 3 else ""
        super().__init__(f"{source}: {len(rejects)} of {total} records rejected, nothing imported ({shown}{more}); "
                         "fix or drop those lines and import again")


class Store:
    """A tuning database at ``url`` (default: ``$CUTLASS_NM_DB`` or SQLite in the user cache dir).

    ``create``: create or migrate the schema (writers). ``read_only``: never create, migrate or change anything
    (lookups, listings). ``timeout``: the longest wait in seconds (see :func:`.db.make_engine`).
    """

    def __init__(self, url: str | None = None, *, create: bool = True, read_only: bool = False,
                 timeout: float | None = None) -> None:
        self.engine: Engine = make_engine(url, read_only=read_only, timeout=timeout)
        self.url = self.engine.url.render_as_string(hide_password=True)
        self.read_only = read_only
        if create and not read_only:
            if is_current(self.engine):
                mark(self.engine)
            else:
                upgrade(self.engine)
        self._env_ids: dict[tuple[str, str], int] = {}

    def _insert(self, table):
        return (pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert)(table)

    # -- environments -------------------------------------------------------------------------
    def environment_id(self, env: EnvFields) -> int:
        """Get or create the row of ``env`` (race-safe across processes)."""
        key = (env.hard_key, env.soft_key)
        if key not in self._env_ids:
            with self.engine.begin() as conn:
                self._env_ids[key] = self._environment_id(conn, env)
        return self._env_ids[key]

    def _environment_id(self, conn: Connection, env: EnvFields) -> int:
        """The row of ``env`` inside the caller's transaction (inserted first: a SQLite writer takes its lock
        before it reads)."""
        conn.execute(self._insert(Environment).values(hard_key=env.hard_key, soft_key=env.soft_key,
                                                      **env.to_dict()).on_conflict_do_nothing())
        return conn.execute(select(Environment.id).where(Environment.hard_key == env.hard_key,
                                                         Environment.soft_key == env.soft_key)).scalar_one()

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
        """Insert validated records (skipping known uids) and update winners, all in one transaction; returns how
        many were new."""
        new = 0
        env_ids: dict[tuple[str, str], int] = {}
        with self.engine.begin() as conn:
            for r in records:
                env = r["environment"]
                ek = (env.hard_key, env.soft_key)
                env_id = env_ids.get(ek) or self._env_ids.get(ek) or self._environment_id(conn, env)
                env_ids[ek] = env_id
                key = r["key"].to_dict()
                cfg = r["config"].to_record()
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
        self._env_ids.update(env_ids)  # committed: safe to remember
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
    def winners(self, hard_key: str | None = None, objective: str = "time", **filters: Any
                ) -> list[tuple[Environment, Winner]]:
        """Winners under ``objective`` (time by default), optionally of one hard environment and with problem
        columns equal to ``filters`` (e.g. ``family="sptc24_sm90", n=4096``). A database not yet
        upgraded to 0003 (opened with ``create=False``) has time winners only; one with no schema yet, none.
        A config that is not JSON reads as :class:`.db.Unparsable` (validation rejects that row alone)."""
        state = schema_state(self.engine)
        if state != "current":
            return self._old_winners(hard_key, filters) if objective == "time" and state == "old" else []
        with Session(self.engine) as s:
            q = select(Environment, Winner).join(Winner, Winner.environment_id == Environment.id)
            q = q.where(Winner.objective == objective, *_equal(Winner.__table__, filters))
            if hard_key:
                q = q.where(Environment.hard_key == hard_key)
            return [(e, w) for e, w in s.execute(q).all()]

    def studies(self) -> dict[str, str | None]:
        """Each measurement's study by uid (where a winner came from)."""
        with Session(self.engine) as s:
            return dict(s.execute(select(Measurement.uid, Measurement.study)).all())

    def _old_winners(self, hard_key: str | None, filters: dict[str, Any]) -> list[tuple[Environment, Any]]:
        """Winners of a pre-0003 schema, read without the columns it lacks."""
        from sqlalchemy import MetaData, Table

        table = Table("winners", MetaData(), autoload_with=self.engine)
        with Session(self.engine) as s:
            q = select(Environment, table).join(table, table.c.environment_id == Environment.id)
            q = q.where(*_equal(table, filters))
            if hard_key:
                q = q.where(Environment.hard_key == hard_key)
            return [(row[0], row) for row in s.execute(q).all()]

    def measurements(self, **filters: Any) -> list[tuple[Environment, Measurement]]:
        """Measurements whose columns equal ``filters``, oldest first (none where there is no schema yet)."""
        if schema_state(self.engine) == "none":
            return []
        with Session(self.engine) as s:
            q = select(Environment, Measurement).join(Measurement, Measurement.environment_id == Environment.id)
            q = q.where(*_equal(Measurement.__table__, filters))
            return [(e, m) for e, m in s.execute(q.order_by(Measurement.id)).all()]

    def count(self) -> int:
        if schema_state(self.engine) == "none":
            return 0
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
                       host=m.host, study=m.study, trial=m.trial, uid=m.uid, created_at=_utc(m.created_at).isoformat())
            rec.update({c: getattr(m, c) for c in ENERGY_COLUMNS if getattr(m, c) is not None})
            out.write(json.dumps(rec) + "\n")
        return len(rows)

    def merge(self, lines: Iterable[str], only_hard_keys: Collection[str] | None = None,
              source: str = "records") -> dict[str, int]:
        """Import exported records, all or nothing (see :func:`check_records`): nothing is written unless every
        record is valid; then all are written in one transaction. Idempotent (known uids are skipped); winners
        keep the best."""
        good, stats = check_records(lines, only_hard_keys, source)
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


def check_records(lines: Iterable[str], only_hard_keys: Collection[str] | None = None, source: str = "records"
                  ) -> tuple[list[dict], dict[str, int]]:
    """Validate every record of an export (no database needed): the valid ones to write and the counts, or
    :class:`ImportRejected` listing each rejected line and why. With ``only_hard_keys``, records of other hard
    environments are skipped. ``source`` names the input in messages."""
    stats = {"new": 0, "known": 0, "rejected": 0, "skipped_env": 0}
    good, rejects, total = [], [], 0
    for line, r in validated_records(lines, source):
        total += 1
        if isinstance(r, RecordError):
            log.info("%s line %d rejected: %s", source, line, r)
            rejects.append((line, str(r)))
            continue
        if only_hard_keys is not None and r["environment"].hard_key not in only_hard_keys:
            stats["skipped_env"] += 1
            continue
        good.append(r)
    if rejects:
        raise ImportRejected(source, rejects, total)
    return good, stats


def _equal(table: Any, filters: dict[str, Any]) -> list[Any]:
    """``column == value`` for each filter (a column the table lacks is a caller's bug: KeyError)."""
    return [table.c[col] == val for col, val in filters.items()]


def _utc(t: datetime.datetime) -> datetime.datetime:
    """SQLite returns the stored time without its zone: it was written in UTC."""
    return t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in a parsed JSON value (a scalar: 0)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def _parse(line: str) -> Any:
    """One JSON line, bounded in length and nesting (RecordError otherwise)."""
    if len(line) > MAX_LINE:
        raise RecordError(f"line of {len(line)} characters is longer than {MAX_LINE}")
    try:
        value = json.loads(line)
    except RecursionError:
        raise RecordError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise RecordError(f"not JSON ({exc})") from None
    if _depth(value) > MAX_DEPTH:
        raise RecordError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return value


def validated_records(lines: Iterable[str], source: str = "records") -> Iterator[tuple[int, dict | RecordError]]:
    """(line number, normalized record or the RecordError that rejects it) of an export, header checked."""
    for line, rec in _records(lines, source):
        try:
            if isinstance(rec, RecordError):
                raise rec
            yield line, validate_measurement(rec)
        except RecordError as exc:
            yield line, exc


def _records(lines: Iterable[str], source: str = "records") -> Iterator[tuple[int, Any]]:
    """(line number, parsed record or the RecordError that rejects it) after checking the header line."""
    it = iter(lines)
    header = next(it, None)
    if header is None:
        return
    try:
        meta = _parse(header)
    except RecordError:
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise StoreError(f"{source} is not a {FORMAT} export (its first line is not the JSON header); pass a file "
                         "written by `cutlass-nm db export`") from None
    for number, line in enumerate(it, start=2):
        if line.strip():
            try:
                yield number, _parse(line)
            except RecordError as exc:
                yield number, exc

"""Validation of every record read from a database or a file, before any of it is used.

A config becomes C++ template arguments, so only ints and enum strings of the family's space pass
(``Config.from_record``); every other field is type- and range-checked: strings printable, free of markup
and no longer than their column, times above a physical floor with p20 <= p50 <= p80, timestamps ISO 8601,
uids canonical UUIDs. A bad record raises RecordError with the reason; callers reject it.
"""

from __future__ import annotations

import datetime
import math
import uuid
from typing import Any

from ..errors import ConfigError, CutlassNMError, PatternError
from ..families import FAMILIES
from ..families.base import DTYPE_NAMES
from ..formats import weight_class
from ..patterns import Pattern
from .fingerprint import HARD, SOFT, STATUSES, EnvFields, ProblemKey, m_bucket
from .schema import Environment, Measurement

MAX_DIM = 1 << 24
DTYPES = DTYPE_NAMES  # the kernel types a record may name (families.base: one list)
LAYOUTS = ("tn",)
_MAX_STR = 128
MIN_MS = 1e-3  # no kernel takes under 1 us: a smaller time is a broken measurement (it would win forever)
MAX_MS = 1e6
_MARKUP = frozenset("[]\\")  # rich console markup and its escape; never in a name we write
_EARLIEST = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)


class RecordError(CutlassNMError, ValueError):
    """A record from a DB or file that failed validation (the message says which field and why)."""


def _int(rec: dict, key: str, lo: int, hi: int) -> int:
    v = rec.get(key)
    if type(v) is not int or not lo <= v <= hi:
        raise RecordError(f"{key}={v!r} is not an int in [{lo}, {hi}]")
    return v


def _column_length(key: str) -> int:
    for table in (Environment, Measurement):
        column = table.__table__.c.get(key)
        if column is not None and getattr(column.type, "length", None):
            return min(column.type.length, _MAX_STR)
    return _MAX_STR


def _str(rec: dict, key: str, allowed: tuple[str, ...] | None = None, nullable: bool = False) -> str | None:
    v = rec.get(key)
    if v is None and nullable:
        return None
    limit = _column_length(key)
    if not isinstance(v, str) or not 0 < len(v) <= limit or not v.isprintable() or _MARKUP & set(v):
        raise RecordError(f"{key}={v!r:.60} is not a printable string of 1 to {limit} chars without [, ] or \\")
    if allowed is not None and v not in allowed:
        raise RecordError(f"{key}={v!r} is not one of {allowed}")
    return v


def _time(rec: dict, key: str) -> float | None:
    v = rec.get(key)
    if v is None:
        return None
    if type(v) not in (int, float) or not math.isfinite(v) or not MIN_MS <= v < MAX_MS:
        raise RecordError(f"{key}={v!r} is not a time in ms in [{MIN_MS:g}, {MAX_MS:g}) (no kernel takes under 1 us)")
    return float(v)


def _timestamp(rec: dict, key: str) -> str:
    """An ISO 8601 time (no zone: UTC), not before 2020 nor in the future; returned in canonical form."""
    v = _str(rec, key)
    try:
        t = datetime.datetime.fromisoformat(v)
    except ValueError:
        raise RecordError(f"{key}={v!r} is not an ISO 8601 timestamp (e.g. 2026-01-31T12:00:00+00:00)") from None
    if t.tzinfo is None:  # SQLite keeps no zone: exports from it are UTC
        t = t.replace(tzinfo=datetime.timezone.utc)
    if not _EARLIEST <= t <= datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1):
        raise RecordError(f"{key}={v!r} is before 2020 or in the future")
    return t.isoformat()


def _uid(rec: dict) -> str:
    v = rec.get("uid")
    try:
        ok = isinstance(v, str) and str(uuid.UUID(v)) == v
    except ValueError:
        ok = False
    if not ok:
        raise RecordError(f"uid={v!r:.60} is not a UUID in canonical form (8-4-4-4-12 lowercase hex)")
    return v


def _nonneg(rec: dict, key: str) -> float | None:
    """An optional finite, non-negative number (energy, power, clock)."""
    v = rec.get(key)
    if v is None:
        return None
    if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
        raise RecordError(f"{key}={v!r} is not a finite non-negative number")
    return float(v)


ENERGY_FIELDS = ("joules", "avg_power_w", "sm_clock_mhz")


def validate_environment(rec: Any) -> EnvFields:
    if not isinstance(rec, dict):
        raise RecordError("environment must be an object")
    fields = {}
    for key in HARD + SOFT:
        if key in ("sm_count", "l2_bytes"):
            fields[key] = _int(rec, key, 0, 1 << 40)
        else:
            fields[key] = _str(rec, key)
    return EnvFields(**fields)


def validate_problem(rec: dict) -> ProblemKey:
    family = _str(rec, "family", tuple(FAMILIES))
    pattern = _str(rec, "pattern")
    try:
        p = Pattern.parse(pattern)
    except PatternError as exc:
        raise RecordError(f"pattern: {exc}") from None
    fam, cls = FAMILIES[family], weight_class(p)
    # or a format of that pattern with more (FP8 scales)
    if not (fam.runs(cls) or any(issubclass(c, cls) for c in (fam.weight, *fam.also_runs))):
        raise RecordError(f"family {family} does not run {pattern} weights")
    dtype = _str(rec, "dtype", DTYPES)
    if dtype not in fam.input_dtypes:
        raise RecordError(f"family {family} takes {'/'.join(fam.input_dtypes)} inputs, not {dtype}")
    m_bucket = _int(rec, "m_bucket", 1, MAX_DIM)
    if m_bucket & (m_bucket - 1):
        raise RecordError(f"m_bucket={m_bucket} is not a power of two")
    if type(rec.get("bias")) is not bool:
        raise RecordError(f"bias={rec.get('bias')!r} is not a bool")
    align = _int(rec, "alignment", 1, 16)
    if align & (align - 1):
        raise RecordError(f"alignment={align} is not a power of two")
    return ProblemKey(family, str(p), m_bucket, _int(rec, "n", 1, MAX_DIM), _int(rec, "k", 1, MAX_DIM), dtype,
                      _str(rec, "out_dtype", DTYPES), _str(rec, "layout", LAYOUTS), rec["bias"], align)


def validate_config(family: str, config: Any):
    try:
        return FAMILIES[family].Config.from_record(config)
    except ConfigError as exc:
        raise RecordError(f"config: {exc}") from None


def validate_measurement(rec: Any) -> dict:
    """A normalized copy of an exported measurement record, or RecordError."""
    if not isinstance(rec, dict):
        raise RecordError("a record must be an object")
    env = validate_environment(rec.get("environment"))
    if rec.get("hard_key") not in (None, env.hard_key):
        raise RecordError("hard_key does not match the environment's hard fields")
    key = validate_problem(rec)
    cfg = validate_config(key.family, rec.get("config"))
    status = _str(rec, "status", STATUSES)
    times = {t: _time(rec, t) for t in ("p20_ms", "p50_ms", "p80_ms")}
    if status == "ok" and times["p50_ms"] is None:
        raise RecordError("an ok measurement needs p50_ms")
    given = [times[t] for t in ("p20_ms", "p50_ms", "p80_ms") if times[t] is not None]
    if given != sorted(given):
        raise RecordError(f"p20_ms <= p50_ms <= p80_ms does not hold: {times}")
    m = _int(rec, "m", 1, MAX_DIM)
    if m_bucket(m) != key.m_bucket:
        raise RecordError(f"m={m} is not in m_bucket {key.m_bucket}")
    energy = {f: _nonneg(rec, f) for f in ENERGY_FIELDS}
    return {"environment": env, "key": key, "config": cfg, "status": status, **times, **energy, "uid": _uid(rec),
            "m": m, "iterations": _int(rec, "iterations", 0, 1 << 31),
            "host": _str(rec, "host"), "study": _str(rec, "study", nullable=True),
            "trial": None if rec.get("trial") is None else _int(rec, "trial", 0, 1 << 31),
            "created_at": _timestamp(rec, "created_at")}

"""Validation of every record read from a database or a file, before any of it is used.

A config becomes C++ template arguments, so only ints and enum strings of the family's space pass
(``Config.from_record``); every other field is type- and range-checked. A bad record raises
RecordError with the reason; callers log it and skip the record.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import ConfigError, CutlassNMError, PatternError
from ..families import FAMILIES
from ..formats import weight_class
from ..patterns import Pattern
from .fingerprint import HARD, SOFT, STATUSES, EnvFields, ProblemKey

MAX_DIM = 1 << 24
DTYPES = ("f16", "bf16", "f32")
LAYOUTS = ("tn",)
_MAX_STR = 128


class RecordError(CutlassNMError, ValueError):
    """A record from a DB or file that failed validation (the message says which field and why)."""


def _int(rec: dict, key: str, lo: int, hi: int) -> int:
    v = rec.get(key)
    if type(v) is not int or not lo <= v <= hi:
        raise RecordError(f"{key}={v!r} is not an int in [{lo}, {hi}]")
    return v


def _str(rec: dict, key: str, allowed: tuple[str, ...] | None = None, nullable: bool = False) -> str | None:
    v = rec.get(key)
    if v is None and nullable:
        return None
    if not isinstance(v, str) or len(v) > _MAX_STR or not v.isprintable():
        raise RecordError(f"{key}={v!r:.60} is not a printable string of <= {_MAX_STR} chars")
    if allowed is not None and v not in allowed:
        raise RecordError(f"{key}={v!r} is not one of {allowed}")
    return v


def _time(rec: dict, key: str) -> float | None:
    v = rec.get(key)
    if v is None:
        return None
    if type(v) not in (int, float) or not math.isfinite(v) or not 0 < v < 1e6:
        raise RecordError(f"{key}={v!r} is not a finite time in ms")
    return float(v)


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
    if not FAMILIES[family].runs(weight_class(p)):
        raise RecordError(f"family {family} does not run {pattern} weights")
    m_bucket = _int(rec, "m_bucket", 1, MAX_DIM)
    if m_bucket & (m_bucket - 1):
        raise RecordError(f"m_bucket={m_bucket} is not a power of two")
    if type(rec.get("bias")) is not bool:
        raise RecordError(f"bias={rec.get('bias')!r} is not a bool")
    align = _int(rec, "alignment", 1, 16)
    if align & (align - 1):
        raise RecordError(f"alignment={align} is not a power of two")
    return ProblemKey(family, str(p), m_bucket, _int(rec, "n", 1, MAX_DIM), _int(rec, "k", 1, MAX_DIM),
                      _str(rec, "dtype", DTYPES), _str(rec, "out_dtype", DTYPES), _str(rec, "layout", LAYOUTS),
                      rec["bias"], align)


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
    uid = _str(rec, "uid")
    if len(uid) != 36:
        raise RecordError("uid must be a 36-character UUID")
    energy = {f: _nonneg(rec, f) for f in ENERGY_FIELDS}
    return {"environment": env, "key": key, "config": cfg, "status": status, **times, **energy, "uid": uid,
            "m": _int(rec, "m", 1, MAX_DIM), "iterations": _int(rec, "iterations", 0, 1 << 31),
            "host": _str(rec, "host"), "study": _str(rec, "study", nullable=True),
            "trial": None if rec.get("trial") is None else _int(rec, "trial", 0, 1 << 31),
            "created_at": _str(rec, "created_at")}

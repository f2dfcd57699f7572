"""SQLAlchemy 2 models. Migrations live in ``cutlass_nm/store/migrations`` (Alembic); keep them in step."""

from __future__ import annotations

import datetime

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Environment(Base):
    """Where a measurement was taken. Hard fields must match to use a record; soft fields may differ."""

    __tablename__ = "environments"
    __table_args__ = (UniqueConstraint("hard_key", "soft_key", name="uq_environment"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hard_key: Mapped[str] = mapped_column(String(64), index=True)
    soft_key: Mapped[str] = mapped_column(String(64))
    gpu: Mapped[str] = mapped_column(String(128))
    compute_capability: Mapped[str] = mapped_column(String(8))
    sm_count: Mapped[int] = mapped_column(Integer)
    l2_bytes: Mapped[int] = mapped_column(BigInteger)
    cutlass_version: Mapped[str] = mapped_column(String(32))
    nvcc_version: Mapped[str] = mapped_column(String(64))
    template_hash: Mapped[str] = mapped_column(String(64))
    driver: Mapped[str] = mapped_column(String(32))
    torch_version: Mapped[str] = mapped_column(String(64))


class _ProblemKey:
    """Columns naming a problem: family, pattern, shape (m bucket + exact m), types, layout, epilogue."""

    family: Mapped[str] = mapped_column(String(32))
    pattern: Mapped[str] = mapped_column(String(16))
    m_bucket: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(8))
    out_dtype: Mapped[str] = mapped_column(String(8))
    layout: Mapped[str] = mapped_column(String(8))
    bias: Mapped[bool] = mapped_column(Boolean)
    alignment: Mapped[int] = mapped_column(Integer)


class Measurement(_ProblemKey, Base):
    """One timed (or failed) config. Kept forever, so that growing a space never invalidates the past."""

    __tablename__ = "measurements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uid: Mapped[str] = mapped_column(String(36), unique=True)
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id"), index=True)
    m: Mapped[int] = mapped_column(Integer)
    config: Mapped[dict] = mapped_column(JSON)
    config_key: Mapped[str] = mapped_column(String(512))
    status: Mapped[str] = mapped_column(String(16))
    p20_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    p50_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    p80_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    joules: Mapped[float | None] = mapped_column(Float, nullable=True)  # per call (NVML energy counter)
    avg_power_w: Mapped[float | None] = mapped_column(Float, nullable=True)
    sm_clock_mhz: Mapped[float | None] = mapped_column(Float, nullable=True)
    iterations: Mapped[int] = mapped_column(Integer, default=0)
    host: Mapped[str] = mapped_column(String(128))
    study: Mapped[str | None] = mapped_column(String(128), nullable=True)
    trial: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True))


class Claim(Base):
    """A tuner's claim on measuring one config in one study (unique: nobody measures it twice)."""

    __tablename__ = "claims"
    __table_args__ = (UniqueConstraint("study", "config_key", name="uq_claim"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study: Mapped[str] = mapped_column(String(256))
    config_key: Mapped[str] = mapped_column(String(512))
    host: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True))


class Winner(_ProblemKey, Base):
    """The best ok measurement per (environment, problem, objective): least time, joules or joules x ms."""

    __tablename__ = "winners"
    __table_args__ = (UniqueConstraint("environment_id", "family", "pattern", "m_bucket", "n", "k", "dtype",
                                       "out_dtype", "layout", "bias", "alignment", "objective", name="uq_winner"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id"), index=True)
    config: Mapped[dict] = mapped_column(JSON)
    p50_ms: Mapped[float] = mapped_column(Float)
    objective: Mapped[str] = mapped_column(String(8), default="time", server_default="time")
    score: Mapped[float | None] = mapped_column(Float, nullable=True)  # the objective's value
    measurement_uid: Mapped[str] = mapped_column(String(36))

"""Engines: the URL (argument, ``CUTLASS_NM_DB``, or SQLite in the user cache dir), SQLite in WAL mode
with a busy timeout, schema upgrades through Alembic, and URLs printed without passwords."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
from filelock import FileLock
from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url

MIGRATIONS = Path(__file__).parent / "migrations"
BUSY_TIMEOUT_MS = 30_000


def default_url() -> str:
    """``$CUTLASS_NM_DB`` (any SQLAlchemy URL) or ``sqlite:///<user cache dir>/tuning.sqlite``."""
    url = os.environ.get("CUTLASS_NM_DB")
    if url:
        return url
    folder = Path(platformdirs.user_cache_dir("cutlass_nm"))
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'tuning.sqlite'}"


def sqlite_file(url: str) -> Path | None:
    """The file behind a SQLite URL (None for other databases and in-memory SQLite)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def redact(url: str) -> str:
    """The URL with any password masked, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL: show only its scheme
        return url.split(":", 1)[0] + ":***"


def make_engine(url: str | None = None) -> Engine:
    url = url or default_url()
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def is_current(engine: Engine) -> bool:
    """True when the schema is at the newest migration (its newest table and column exist)."""
    insp = inspect(engine)
    return "claims" in insp.get_table_names() and "objective" in {c["name"] for c in insp.get_columns("winners")}


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply the Alembic migrations, serialized across processes (file lock or advisory lock)."""
    from alembic import command
    from alembic.config import Config

    def run(connection) -> None:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)

    if engine.dialect.name == "sqlite":
        db_file = engine.url.database
        lock = FileLock(f"{db_file}.migrate.lock") if db_file and db_file != ":memory:" else None
        if lock:
            with lock, engine.begin() as conn:
                run(conn)
        else:
            with engine.begin() as conn:
                run(conn)
    elif engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(736512)"))
            run(conn)
    else:
        with engine.begin() as conn:
            run(conn)

"""Engines: the URL (argument, ``CUTLASS_NM_DB``, or SQLite in the user cache dir), bounded waits, our SQLite files
marked and checked, schema upgrades through Alembic, and URLs printed without passwords.

Waits are bounded by ``$CUTLASS_NM_DB_TIMEOUT`` seconds (default 5): PostgreSQL's connect and statement timeouts,
and the SQLite busy timeout of callers that pass ``timeout`` (the CLI). Read-only engines (dispatch lookup,
``db ls``/``show``/``path``) never create, migrate or change a file: SQLite is opened with ``mode=ro`` and waits at
most :data:`READ_LOCK_WAIT_S` on a writer's lock; PostgreSQL sessions are read-only with a lock timeout of as long.

Our SQLite files carry ``PRAGMA application_id`` = :data:`APPLICATION_ID` (files from before the mark are known by
our version table). Any other non-empty SQLite file is refused, untouched.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import warnings
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import platformdirs
from filelock import FileLock
from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from ..errors import StoreError

MIGRATIONS = Path(__file__).parent / "migrations"
VERSION_TABLE = "cutlass_nm_alembic_version"  # Optuna's RDB storage keeps its "alembic_version" in the same DB
APPLICATION_ID = 0x434E4D31  # "CNM1", in the header of every SQLite file we create
DEFAULT_TIMEOUT_S = 5.0  # $CUTLASS_NM_DB_TIMEOUT: connect + statement timeout (fall back within this)
READ_LOCK_WAIT_S = 0.5  # the longest a read-only engine waits on a writer's lock
WRITER_BUSY_S = 30.0  # SQLite writers racing each other (tuner processes) unless given a timeout


class MissingDatabase(StoreError):
    """A read-only open of a SQLite file that does not exist yet (nothing is created)."""


class ForeignDatabase(StoreError):
    """A database that is not a cutlass_nm tuning database (left untouched)."""


class Unparsable(str):
    """A JSON column's text that is not JSON: read as this marker, so one bad row is one rejected row."""


def _lenient_json(value: str) -> Any:
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return Unparsable(value)


def db_timeout() -> float:
    """Seconds any database wait may take: ``$CUTLASS_NM_DB_TIMEOUT`` (a positive number), default 5."""
    raw = os.environ.get("CUTLASS_NM_DB_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        warnings.warn(f"cutlass_nm: CUTLASS_NM_DB_TIMEOUT={raw!r} is not a positive number of seconds; "
                      f"using {DEFAULT_TIMEOUT_S:g}", RuntimeWarning, stacklevel=2)
        return DEFAULT_TIMEOUT_S
    return value


def default_folder() -> Path:
    return Path(platformdirs.user_cache_dir("cutlass_nm"))


def default_url() -> str:
    """``$CUTLASS_NM_DB`` (any SQLAlchemy URL) or ``sqlite:///<user cache dir>/tuning.sqlite`` (not created here)."""
    return os.environ.get("CUTLASS_NM_DB") or f"sqlite:///{default_folder() / 'tuning.sqlite'}"


def parse_url(url: str) -> URL:
    try:
        return make_url(url)
    except (ArgumentError, ValueError):
        raise StoreError(f"{redact(url)!r} is not a database URL; use e.g. sqlite:////path/tuning.sqlite or "
                         "postgresql+psycopg://user@host/db") from None


def sqlite_file(url: str) -> Path | None:
    """The file behind a SQLite URL (None for other databases and in-memory SQLite)."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def redact(url: str) -> str:
    """The URL with any password masked, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL: show only its scheme
        return url.split(":", 1)[0] + ":***"


def _ro_connect(path: Path, wait_s: float) -> sqlite3.Connection:
    """A read-only connection: never creates the file, its journal, or changes its journal mode."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=wait_s, check_same_thread=False)


def sqlite_state(path: Path) -> str:
    """"missing", "empty" (no tables, unmarked) or "ours"; StoreError for a foreign, corrupt or locked file.
    Reads the file read-only."""
    if not path.exists():
        return "missing"
    if path.is_file() and path.stat().st_size == 0:
        return "empty"
    try:
        with closing(_ro_connect(path, READ_LOCK_WAIT_S)) as conn:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    except sqlite3.Error as exc:
        if "locked" in str(exc):
            raise StoreError(f"{path} is locked by a writer; try again when it is done") from None
        raise StoreError(f"{path} is not a usable SQLite database ({exc}); move it away or pass another URL "
                         "(--url / CUTLASS_NM_DB)") from None
    if app_id == APPLICATION_ID or VERSION_TABLE in tables:
        return "ours"
    if not tables and app_id == 0:
        return "empty"
    shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
    raise ForeignDatabase(f"{path} is not a cutlass_nm tuning database (application_id {app_id:#x}, tables: "
                          f"{shown or 'none'}); it was left untouched: pass another URL (--url / CUTLASS_NM_DB)")


def make_engine(url: str | None = None, *, read_only: bool = False, timeout: float | None = None) -> Engine:
    """An engine for ``url`` (default :func:`default_url`). ``read_only``: see the module doc. ``timeout``: the
    longest wait in seconds (default ``$CUTLASS_NM_DB_TIMEOUT``; SQLite writers without it wait up to 30 s)."""
    url = url or default_url()
    parsed = parse_url(url)
    try:
        if parsed.get_backend_name() == "sqlite":
            busy = READ_LOCK_WAIT_S if read_only else (WRITER_BUSY_S if timeout is None else timeout)
            return _sqlite_engine(parsed, read_only, busy)
        return _server_engine(parsed, read_only, db_timeout() if timeout is None else timeout)
    except NoSuchModuleError:
        raise StoreError(f"{redact(url)}: unknown database kind {parsed.drivername!r}; use sqlite:///path or "
                         "postgresql+psycopg://user@host/db") from None
    except ImportError as exc:
        hint = " (pip install 'psycopg[binary]')" if parsed.get_backend_name() == "postgresql" else ""
        raise StoreError(f"{redact(url)}: the database driver {exc.name or parsed.drivername!r} is not installed; "
                         f"install it{hint} or use another URL") from None


def _sqlite_engine(parsed: URL, read_only: bool, busy_s: float) -> Engine:
    path = None if not parsed.database or parsed.database == ":memory:" else Path(parsed.database)
    state = sqlite_state(path) if path is not None else "empty"
    if read_only and path is not None:
        if state == "missing":
            raise MissingDatabase(f"no tuning database at {path} yet (cutlass-nm tune or db import creates one)")
        return create_engine(parsed, creator=lambda: _ro_connect(path, busy_s), json_deserializer=_lenient_json)
    if path is not None and state == "missing" and path.parent == default_folder():
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(parsed, connect_args={"timeout": busy_s}, json_deserializer=_lenient_json)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(busy_s * 1000)}")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    return engine


def _server_engine(parsed: URL, read_only: bool, timeout_s: float) -> Engine:
    """PostgreSQL (any other server database gets no extra settings): connect and statement timeouts; read-only
    sessions that wait at most READ_LOCK_WAIT_S on a lock (a migration's table lock)."""
    if parsed.get_backend_name() != "postgresql":
        return create_engine(parsed, pool_pre_ping=True)
    ms = int(timeout_s * 1000)
    settings = [f"-c statement_timeout={ms}", f"-c lock_timeout={int(READ_LOCK_WAIT_S * 1000) if read_only else ms}"]
    if read_only:
        settings.append("-c default_transaction_read_only=on")
    given = parsed.query.get("options")  # the URL's own (e.g. a search_path) come first
    options = " ".join([*([given] if isinstance(given, str) else given or ()), *settings])
    # libpq's connect_timeout is whole seconds, at least 2: keep the total within timeout_s where it can be
    connect_args = {"connect_timeout": max(2, math.floor(timeout_s * 0.8)), "options": options}
    return create_engine(parsed, pool_pre_ping=True, connect_args=connect_args, json_deserializer=_lenient_json)


@contextmanager
def translated(url: str) -> Iterator[None]:
    """Database errors as one-line StoreErrors that say what to do (for the CLI)."""
    try:
        yield
    except SQLAlchemyError as exc:
        orig = getattr(exc, "orig", None) or exc
        first = (str(orig).strip().splitlines() or [orig.__class__.__name__])[0][:200]
        raise StoreError(f"{redact(url)}: {first} ({orig.__class__.__name__}); check the URL and the server, or "
                         "raise CUTLASS_NM_DB_TIMEOUT (seconds)") from None


def schema_state(engine: Engine) -> str:
    """"none" (no tables of ours), "old" (an earlier migration) or "current"."""
    insp = inspect(engine)
    tables = set(insp.get_table_names())
    if "winners" not in tables:
        return "none"
    current = "claims" in tables and "objective" in {c["name"] for c in insp.get_columns("winners")}
    return "current" if current else "old"


def is_current(engine: Engine) -> bool:
    """True when the schema is at the newest migration (its newest table and column exist)."""
    return schema_state(engine) == "current"


def mark(engine: Engine) -> None:
    """Stamp a SQLite file as ours (a no-op elsewhere, and where already stamped)."""
    if engine.dialect.name != "sqlite":
        return
    with engine.begin() as conn:
        if conn.exec_driver_sql("PRAGMA application_id").scalar() != APPLICATION_ID:
            conn.exec_driver_sql(f"PRAGMA application_id={APPLICATION_ID}")


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply the Alembic migrations, serialized across processes (file lock or advisory lock); marks SQLite files."""
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
        mark(engine)
    elif engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(736512)"))
            run(conn)
    else:
        with engine.begin() as conn:
            run(conn)

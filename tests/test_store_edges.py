"""The tuning database's hostile edges: a silent server, a writer's lock, a bad import, a foreign SQLite file and a
malformed winner row. Network tests use loopback listeners only; PostgreSQL tests skip, saying why, without it."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import sqlite3
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from store_helpers import CONFIGS, SM90, drop_schema, env, key, pg_schema_url

from cutlass_nm.families import KernelTypes, Problem
from cutlass_nm.store.db import APPLICATION_ID, ForeignDatabase, db_timeout, make_engine
from cutlass_nm.store.lookup import TunedSelector
from cutlass_nm.store.store import ImportRejected, Store

PROBLEM = Problem(2048, 4096, 4096, KernelTypes("f16", "f16", False))


@contextmanager
def silent_server() -> Iterator[int]:
    """A loopback listener that accepts connections and never says a word; yields its port."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    held, stop = [], threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for s in [*held, srv]:
            s.close()


@contextmanager
def full_backlog() -> Iterator[int]:
    """A loopback listener with backlog 0 that never accepts, its queue filled: new SYNs go unanswered."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port, fillers = srv.getsockname()[1], []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        fillers.append(c)
    time.sleep(0.1)  # the handshakes of the first fillers complete and fill the queue
    try:
        yield port
    finally:
        for s in [*fillers, srv]:
            s.close()


def _pg_at(port: int) -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/test"


@pytest.mark.parametrize("server", [silent_server, full_backlog], ids=["accepts-never-answers", "queue-full"])
def test_silent_server_falls_back_within_the_timeout(server, monkeypatch):
    """Dispatch's default selector on an unresponsive PostgreSQL: heuristic (None) within 5 s, one warning."""
    pytest.importorskip("psycopg", reason="the PostgreSQL driver (psycopg) is needed for this test")
    from cutlass_nm import dispatch
    from cutlass_nm.store import lookup

    assert db_timeout() == 5.0
    monkeypatch.setattr(lookup, "current_environment", lambda family: env())  # this CPU has no GPU to fingerprint
    monkeypatch.setattr(dispatch, "_selector", None)
    with server() as port:
        monkeypatch.setenv("CUTLASS_NM_DB", _pg_at(port))
        t0 = time.monotonic()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            selector = dispatch._default_selector()
            assert selector(SM90, PROBLEM) is None
            assert selector(SM90, Problem(64, 4096, 4096, PROBLEM.types)) is None
        elapsed = time.monotonic() - t0
    assert elapsed <= 5.0, elapsed
    assert len(caught) == 1 and "unusable" in str(caught[0].message), [str(w.message) for w in caught]


def _rollback_journal_db(path: Path) -> str:
    url = f"sqlite:///{path}"
    store = Store(url)
    store.record(env(), key(), 2048, CONFIGS[1], p50_ms=1.0)
    store.engine.dispose()  # leaving WAL needs the file to itself
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    return url


def test_locked_db_does_not_stall_dispatch(tmp_path):
    """A rollback-journal DB under a writer's exclusive lock: fall back within 1 s; a reserved lock: read through."""
    url = _rollback_journal_db(tmp_path / "t.sqlite")
    writer = sqlite3.connect(tmp_path / "t.sqlite", isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # a writer at work, not yet committing: readers go on
        assert TunedSelector(url, env=env())(SM90, PROBLEM) == CONFIGS[1]
        writer.execute("ROLLBACK")
        writer.execute("BEGIN EXCLUSIVE")  # committing: readers must wait or give up
        sel = TunedSelector(url, env=env())
        t0 = time.monotonic()
        with pytest.warns(RuntimeWarning, match="unusable"):
            assert sel(SM90, PROBLEM) is None
        assert time.monotonic() - t0 <= 1.0
    finally:
        writer.close()


def _export(store: Store) -> list[str]:
    buf = io.StringIO()
    store.export(buf)
    return buf.getvalue().splitlines()


def _bad_lines(good: str) -> list[tuple[str, str]]:
    """(line, what its rejection says) for each way a record can be wrong that validation used to let through."""
    def variant(**over) -> str:
        return json.dumps({**json.loads(good), "uid": str(uuid.uuid4()), **over})

    return [(variant(created_at="yesterday"), "created_at"), ("[" * 5000 + "]" * 5000, "nested"),
            (variant(config={"tile_m": [[[[1]]]]}), "nested"), (variant(p50_ms=1e-300), "p50_ms"),
            (variant(p20_ms=2.0, p50_ms=1.0, p80_ms=0.5), "p20_ms <= p50_ms"),
            (variant(host="[link=https://example.com]h100[/link]"), "host"), (variant(uid="not-a-uuid"), "uid"),
            (variant(host="x" * 100_000), "longer than"), (variant(study="a\x1b[31mred"), "study")]


def test_bad_import_writes_nothing(url, tmp_path):
    src = Store(f"sqlite:///{tmp_path / 'src.sqlite'}")
    for i, cfg in enumerate(CONFIGS[:5]):
        src.record(env(), key(), 2048, cfg, p50_ms=2.0 - i * 0.1)
    header, *good = _export(src)
    bad = _bad_lines(good[0])
    dst = Store(url)
    with pytest.raises(ImportRejected) as exc:
        dst.merge([header, *good, *(line for line, _ in bad)])
    assert len(exc.value.rejects) == len(bad) and exc.value.total == len(good) + len(bad)
    for (_, reason), (_, expected) in zip(exc.value.rejects, bad, strict=True):
        assert expected in reason
    assert dst.count() == 0 and dst.winners() == []
    assert dst.merge([header, *good])["new"] == len(good)  # the good ones alone import
    dst.engine.dispose()


def _foreign_sqlite(path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('alice')")
        conn.commit()


def _fingerprint(path: Path) -> tuple:
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    return hashlib.sha256(path.read_bytes()).hexdigest(), mode, sorted(p.name for p in path.parent.iterdir())


def test_foreign_sqlite_is_never_touched(tmp_path):
    """Dispatch lookup and every writer refuse another application's SQLite file, leaving it byte-identical."""
    path = tmp_path / "app.sqlite"
    _foreign_sqlite(path)
    before = _fingerprint(path)
    assert before[1] == "delete"
    url = f"sqlite:///{path}"
    sel = TunedSelector(url, env=env())
    with pytest.warns(RuntimeWarning, match="not a cutlass_nm tuning database"):
        assert sel(SM90, PROBLEM) is None
    for open_it in (lambda: Store(url), lambda: Store(url, read_only=True), lambda: make_engine(url)):
        with pytest.raises(ForeignDatabase, match="left untouched"):
            open_it()
    assert _fingerprint(path) == before


def test_our_files_are_marked_and_reads_change_nothing(tmp_path):
    path = tmp_path / "t.sqlite"
    url = _rollback_journal_db(path)  # e.g. moved to a filesystem without shared memory
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    before = _fingerprint(path)
    assert TunedSelector(url, env=env())(SM90, PROBLEM) == CONFIGS[1]
    assert len(Store(url, read_only=True).winners()) == 1
    assert _fingerprint(path) == before  # still rollback-journal: reads never switch it to WAL
    with closing(sqlite3.connect(path)) as conn:  # a file from before the mark: known by our version table
        conn.execute("PRAGMA application_id=0")
        conn.commit()
    assert TunedSelector(url, env=env())(SM90, PROBLEM) == CONFIGS[1]


def test_read_only_opens_never_create(tmp_path):
    url = f"sqlite:///{tmp_path / 'none.sqlite'}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert TunedSelector(url, env=env(), quiet_if_missing=True)(SM90, PROBLEM) is None
    with pytest.warns(RuntimeWarning, match="no tuning database"):
        assert TunedSelector(url, env=env())(SM90, PROBLEM) is None
    assert list(tmp_path.iterdir()) == []


def test_one_bad_winner_row_is_skipped_alone(tmp_path):
    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    store = Store(url)
    store.record(env(), key(n=4096), 2048, CONFIGS[1], p50_ms=1.0)
    store.record(env(), key(n=8192), 2048, CONFIGS[2], p50_ms=1.0)
    store.record(env(), key(n=1024), 2048, CONFIGS[3], p50_ms=1.0)
    with closing(sqlite3.connect(tmp_path / "t.sqlite")) as conn:
        conn.execute("UPDATE winners SET config = '{not json' WHERE n = 4096")
        conn.execute("UPDATE winners SET n = 'many' WHERE n = 1024")
        conn.commit()
    sel = TunedSelector(url, env=env())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert sel(SM90, Problem(2048, 8192, 4096, PROBLEM.types)) == CONFIGS[2]
        assert sel(SM90, PROBLEM) == CONFIGS[2]  # its own winner is unreadable: the nearest good one
    assert len(caught) == 1 and "skipped 2 malformed winner row(s)" in str(caught[0].message)


def test_bad_config_row_on_postgresql_is_skipped_alone():
    engine, schema, url = pg_schema_url()
    try:
        store = Store(url)
        store.record(env(), key(n=4096), 2048, CONFIGS[1], p50_ms=1.0)
        store.record(env(), key(n=8192), 2048, CONFIGS[2], p50_ms=1.0)
        from sqlalchemy import text

        with store.engine.begin() as conn:
            conn.execute(text("""UPDATE winners SET config = '{"tile_m": "evil"}' WHERE n = 4096"""))
        with pytest.warns(RuntimeWarning, match="skipped 1 malformed"):
            assert TunedSelector(url, env=env())(SM90, Problem(2048, 8192, 4096, PROBLEM.types)) == CONFIGS[2]
        store.engine.dispose()
    finally:
        drop_schema(engine, schema)


def test_read_only_postgresql_creates_no_tables():
    engine, schema, url = pg_schema_url()
    try:
        from sqlalchemy import inspect

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert TunedSelector(url, env=env())(SM90, PROBLEM) is None
        reader = Store(url, read_only=True)
        assert reader.winners() == []
        reader.engine.dispose()
        assert inspect(engine).get_table_names(schema=schema) == []
    finally:
        drop_schema(engine, schema)


def test_timeout_setting(monkeypatch):
    monkeypatch.setenv("CUTLASS_NM_DB_TIMEOUT", "2.5")
    assert db_timeout() == 2.5
    monkeypatch.setenv("CUTLASS_NM_DB_TIMEOUT", "soon")
    with pytest.warns(RuntimeWarning, match="CUTLASS_NM_DB_TIMEOUT"):
        assert db_timeout() == 5.0

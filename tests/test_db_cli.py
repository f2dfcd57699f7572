"""``cutlass-nm db``: user errors are one line and exit 2, read-only commands touch nothing, imports are all or
nothing, output is escaped, filtered and never cut when piped."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from store_helpers import CONFIGS, env, key
from test_store_edges import _bad_lines, _export, _fingerprint, _foreign_sqlite, silent_server

from cutlass_nm import cli
from cutlass_nm.store.store import Store

ROOT = Path(__file__).resolve().parent.parent


def _db(capsys, url: str, *args: str) -> tuple[int, str, str]:
    rc = cli.main(["db", "--url", url, *args])
    out, err = capsys.readouterr()
    return rc, out, err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cutlass-nm: error: "), err
    return lines[0]


def test_silent_server_cli_exits_2_within_the_timeout():
    """The CLI gives up on a server that accepts and never answers after its 2 s timeout: it takes no more than
    the same CLI's start-up and a failed connection to a closed port (the slower of two such runs right
    after it), plus the timeout and 8 s of start-up noise on a busy 2-core host (a hang would take the 60 s)."""
    pytest.importorskip("psycopg", reason="the PostgreSQL driver (psycopg) is needed for this test")

    def cli_db_ls(port: int) -> tuple[subprocess.CompletedProcess, float]:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "cutlass_nm.cli", "db", "--url",
                               f"postgresql+psycopg://postgres@127.0.0.1:{port}/test", "ls"], cwd=ROOT,
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "CUTLASS_NM_DB_TIMEOUT": "2"})
        return proc, time.monotonic() - t0

    with silent_server() as port:
        proc, elapsed = cli_db_ls(port)
    refused, before = cli_db_ls(port)  # the server is gone: the connection is refused at once
    again, after = cli_db_ls(port)
    assert refused.returncode == again.returncode == proc.returncode == 2, proc.stderr
    assert "timeout" in _one_error_line(proc.stderr)
    baseline = max(before, after)
    assert elapsed < baseline + 2 + 8, (elapsed, before, after)


def test_user_errors_are_one_line_exit_2(tmp_path, capsys):
    good = f"sqlite:///{tmp_path / 'ok.sqlite'}"
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"this is not a database" * 100)
    cases = [(["--url", "not a url", "ls"], "not a database URL"),
             (["--url", "mysql://u@127.0.0.1/x", "ls"], "not installed"),
             (["--url", "nosuchdb://u@127.0.0.1/x", "ls"], "unknown database kind"),
             (["--url", f"sqlite:///{corrupt}", "ls"], "not a usable SQLite database"),
             (["--url", f"sqlite:///{corrupt}", "upgrade"], "not a usable SQLite database"),
             (["--url", good, "import", str(ROOT / "README.md")], "not a cutlass_nm.tuning/1 export"),
             (["--url", good, "import", str(tmp_path / "missing.jsonl")], "no such file"),
             (["--url", good, "import", str(tmp_path)], "cannot read it")]
    for args, expected in cases:
        assert cli.main(["db", *args]) == 2, args
        err = capsys.readouterr().err
        assert expected in _one_error_line(err), (args, err)
    assert not (tmp_path / "ok.sqlite").exists()


def test_foreign_sqlite_is_byte_identical_after_every_command(tmp_path, capsys):
    (tmp_path / "app").mkdir()
    path = tmp_path / "app" / "app.sqlite"
    _foreign_sqlite(path)
    before = _fingerprint(path)
    url = f"sqlite:///{path}"
    assert _db(capsys, url, "path")[0] == 0
    records = tmp_path / "r.jsonl"
    src = Store(f"sqlite:///{tmp_path / 'src.sqlite'}")
    src.record(env(), key(), 2048, CONFIGS[0], p50_ms=1.0)
    records.write_text("\n".join(_export(src)) + "\n")
    for args in (["ls"], ["show"], ["export"], ["upgrade"], ["gc"], ["import", str(records)]):
        rc, _, err = _db(capsys, url, *args)
        assert rc == 2 and "not a cutlass_nm tuning database" in _one_error_line(err), args
    assert _fingerprint(path) == before


def test_read_only_commands_on_a_fresh_machine_create_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CUTLASS_NM_DB", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for args in (["path"], ["ls"], ["show"]):
        assert cli.main(["db", *args]) == 0
    out, err = capsys.readouterr()
    assert "tuning.sqlite" in out and "no tuning database" in err
    assert list(tmp_path.iterdir()) == []


def test_bad_import_writes_nothing_and_reports_why(tmp_path, capsys):
    src = Store(f"sqlite:///{tmp_path / 'src.sqlite'}")
    for cfg in CONFIGS[:4]:
        src.record(env(), key(), 2048, cfg, p50_ms=1.0)
    header, *good = _export(src)
    bad = _bad_lines(good[0])
    records = tmp_path / "bad.jsonl"
    records.write_text("\n".join([header, *good, *(line for line, _ in bad)]) + "\n")
    report = tmp_path / "rejects.txt"
    url = f"sqlite:///{tmp_path / 'dst.sqlite'}"
    rc, _, err = _db(capsys, url, "import", str(records), "--rejects", str(report))
    assert rc == 2 and f"{len(bad)} of {len(good) + len(bad)} records rejected, nothing imported" in err
    assert len(report.read_text().splitlines()) == len(bad)
    assert not (tmp_path / "dst.sqlite").exists()  # validated before the database is even opened
    records.write_text("\n".join([header, *good]) + "\n")
    assert _db(capsys, url, "import", str(records))[0] == 0
    assert Store(url, read_only=True).count() == len(good)


def _db_with_markup(tmp_path) -> str:
    """A DB one of whose rows (written around validation, e.g. by an old version) carries rich markup."""
    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    store = Store(url)
    store.record(env(), key(n=4096), 2048, CONFIGS[0], p50_ms=1.0, host="gpu-host")
    store.record(env(), key(n=8192), 2048, CONFIGS[1], p50_ms=2.0, host="gpu-host")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE measurements SET host = '[link=https://evil.example]click[/link]' "
                             "WHERE n = 8192")
    return url


def test_piped_output_is_filtered_named_and_complete(tmp_path, capsys):
    url = _db_with_markup(tmp_path)
    rc, out, _ = _db(capsys, url, "ls", "--family", "sptc24_sm90", "--pattern", "2:4", "--shape", "1500,4096,4096")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 2 and lines[0].split("\t")[0] == "gpu"
    assert lines[1].endswith(" ".join(f"{k}={v}" for k, v in CONFIGS[0].to_record().items()))  # every field, named
    rc, out, _ = _db(capsys, url, "show", "--n", "8192")
    assert rc == 0 and "[link=https://evil.example]click[/link]" in out  # printed as text, not markup
    assert _db(capsys, url, "ls", "--pattern", "2:8")[1].splitlines()[1:] == []


def test_terminal_output_never_renders_markup(tmp_path, capsys, monkeypatch):
    url = _db_with_markup(tmp_path)
    buf = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=buf, force_terminal=True, width=400, color_system=None))
    assert cli.main(["db", "--url", url, "show"]) == 0
    assert "[link=https://evil.example]click[/link]" in buf.getvalue()


def test_merge_from_another_database_reads_it_only(tmp_path, capsys):
    src_path = tmp_path / "src.sqlite"
    src = Store(f"sqlite:///{src_path}")
    src.record(env(), key(), 2048, CONFIGS[2], p50_ms=1.0)
    src.engine.dispose()
    before = _fingerprint(src_path)
    rc, out, _ = _db(capsys, f"sqlite:///{tmp_path / 'dst.sqlite'}", "merge", f"sqlite:///{src_path}")
    assert rc == 0 and "1 new" in out
    assert _fingerprint(src_path)[:2] == before[:2]
    assert json.loads(_export(Store(f"sqlite:///{tmp_path / 'dst.sqlite'}", read_only=True))[1])["config"] == \
        CONFIGS[2].to_record()


def test_ls_names_each_winners_config_source(tmp_path, capsys):
    """Winners imported from a shipped file read "shipped", others "user"; ``--shipped`` lists the package's."""
    shipped = (Path(cli.__file__).parent / "configs").glob("*.jsonl")
    path = next(iter(shipped))
    lines = path.read_text().splitlines()
    url = f"sqlite:///{tmp_path / 'x.sqlite'}"
    assert _db(capsys, url, "import", str(path))[0] == 0
    rc, out, _ = _db(capsys, url, "ls")
    header, *rows = out.splitlines()
    studies = {json.loads(x)["study"] for x in lines[1:]}
    want = {"shipped" if s.startswith("ship_configs/") else "user" for s in studies}
    assert rc == 0 and header.split("\t")[9] == "source" and {r.split("\t")[9] for r in rows} == want
    rc, out, _ = _db(capsys, "sqlite:///" + str(tmp_path / "never.sqlite"), "ls", "--shipped")
    header, *rows = out.splitlines()
    assert rc == 0 and rows and {r.split("\t")[9] for r in rows} == {"shipped"}
    assert not (tmp_path / "never.sqlite").exists()

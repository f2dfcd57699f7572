"""Tuning database on SQLite and on the machine's real PostgreSQL (skipped, with the reason, if unreachable)."""

from __future__ import annotations

import io
import json
import multiprocessing as mp
import uuid
import warnings

import pytest
from store_helpers import CONFIGS, SM90, env, key, pg_schema_url, write_many

from cutlass_nm.families import KernelTypes, Problem
from cutlass_nm.store.db import make_engine, redact, upgrade
from cutlass_nm.store.lookup import TunedSelector
from cutlass_nm.store.store import ImportRejected, Store

_pg_schema_url = pg_schema_url  # other test modules import it from here


def test_concurrent_writers_lose_nothing(url):
    """8 processes x 200 records -> exactly 1600 rows, every uid once, every winner the true minimum."""
    store = Store(url)  # migrate once, then race
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=write_many, args=(url, w, 200)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0] * 8
    rows = store.measurements()
    assert len(rows) == 1600
    assert len({m.uid for _, m in rows}) == 1600
    assert {(m.study, m.trial) for _, m in rows} == {(f"w{w}", i) for w in range(8) for i in range(200)}
    best: dict = {}
    for _, m in rows:
        k = (m.m_bucket, m.n, m.k)
        best[k] = min(best.get(k, float("inf")), m.p50_ms)
    winners = {(w.m_bucket, w.n, w.k): w.p50_ms for _, w in store.winners()}
    assert winners == best


def test_export_merge_is_idempotent(url, tmp_path):
    src = Store(f"sqlite:///{tmp_path / 'src.sqlite'}")
    for i, cfg in enumerate(CONFIGS):
        src.record(env(), key(), 2048, cfg, p50_ms=2.0 - i * 0.1)
    src.record(env(), key(), 2048, CONFIGS[0], status="compile_error")
    buf = io.StringIO()
    assert src.export(buf) == len(CONFIGS) + 1
    dst = Store(url)
    first = dst.merge(buf.getvalue().splitlines())
    second = dst.merge(buf.getvalue().splitlines())
    assert first == {"new": len(CONFIGS) + 1, "known": 0, "rejected": 0, "skipped_env": 0}
    assert second == {"new": 0, "known": len(CONFIGS) + 1, "rejected": 0, "skipped_env": 0}
    assert dst.count() == len(CONFIGS) + 1
    (_, w), = dst.winners()
    assert w.config == CONFIGS[-1].to_record() and w.p50_ms == pytest.approx(2.0 - (len(CONFIGS) - 1) * 0.1)


def test_merge_skips_hard_mismatches_when_asked(tmp_path):
    src = Store(f"sqlite:///{tmp_path / 'a.sqlite'}")
    src.record(env(), key(), 2048, CONFIGS[0], p50_ms=1.0)
    src.record(env(gpu="a100-sxm4-80gb", compute_capability="8.0"), key(), 2048, CONFIGS[1], p50_ms=1.0)
    buf = io.StringIO()
    src.export(buf)
    dst = Store(f"sqlite:///{tmp_path / 'b.sqlite'}")
    stats = dst.merge(buf.getvalue().splitlines(), only_hard_keys={env().hard_key})
    assert stats["new"] == 1 and stats["skipped_env"] == 1


HOSTILE_CONFIGS = [
    {**CONFIGS[0].to_record(), "schedule": 'cooperative>; } asm("trap"); {'},
    {**CONFIGS[0].to_record(), "tile_m": "128"},
    {**CONFIGS[0].to_record(), "tile_m": 1 << 30},
    {**CONFIGS[0].to_record(), "stages": 2.5},
    {"tile_m": 128, "injected": "x"},
]


def test_hostile_records_are_rejected_with_reasons(tmp_path, caplog):
    src = Store(f"sqlite:///{tmp_path / 'a.sqlite'}")
    src.record(env(), key(), 2048, CONFIGS[0], p50_ms=1.0)
    buf = io.StringIO()
    src.export(buf)
    header, good = buf.getvalue().splitlines()
    bad_lines = []
    for cfg in HOSTILE_CONFIGS:
        rec = json.loads(good)
        rec.update(config=cfg, uid=str(uuid.uuid4()))
        bad_lines.append(json.dumps(rec))
    for field, value in [("n", -1), ("k", 1 << 40), ("family", "sptc24_sm90; rm -rf /"), ("p50_ms", float("nan")),
                         ("m_bucket", 3), ("status", "great"), ("bias", "yes"), ("hard_key", "0" * 32)]:
        rec = json.loads(good)
        rec.update({field: value, "uid": str(uuid.uuid4())})
        bad_lines.append(json.dumps(rec))
    bad_lines.append("{not json")
    dst = Store(f"sqlite:///{tmp_path / 'b.sqlite'}")
    with caplog.at_level("INFO", logger="cutlass_nm.store"), pytest.raises(ImportRejected) as exc:
        dst.merge([header, good, *bad_lines])  # one good record: all or nothing
    assert [line for line, _ in exc.value.rejects] == list(range(3, 3 + len(bad_lines)))
    assert exc.value.total == len(bad_lines) + 1 and "nothing imported" in str(exc.value)
    assert dst.count() == 0
    assert "config" in caplog.text and "rejected" in caplog.text


def _problem(m=2048, n=4096, k=4096):
    return Problem(m, n, k, KernelTypes("f16", "f16", False))


def test_lookup_order_exact_nearest_soft_heuristic(tmp_path):
    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    store = Store(url)
    store.record(env(), key(m=2048), 2048, CONFIGS[1], p50_ms=1.0)
    store.record(env(), key(m=64), 64, CONFIGS[2], p50_ms=1.0)
    sel = TunedSelector(url, env=env())
    assert sel(SM90, _problem(m=2048)) == CONFIGS[1]  # exact
    assert sel(SM90, _problem(m=1500)) == CONFIGS[1]  # same bucket
    assert sel(SM90, _problem(m=4096)) == CONFIGS[1]  # nearest bucket
    assert sel(SM90, _problem(m=32)) == CONFIGS[2]
    assert sel(SM90, _problem(m=2048, n=4608)) == CONFIGS[1]  # nearest n
    assert sel(SM90, Problem(2048, 4096, 4096, KernelTypes("bf16", "bf16", False))) is None  # heuristic
    # a record from another driver/torch: used, with one warning
    store2 = Store(f"sqlite:///{tmp_path / 'soft.sqlite'}")
    store2.record(env(driver="590.0", torch_version="2.12.0"), key(), 2048, CONFIGS[3], p50_ms=1.0)
    sel2 = TunedSelector(f"sqlite:///{tmp_path / 'soft.sqlite'}", env=env())
    with pytest.warns(RuntimeWarning, match="different driver"):
        assert sel2(SM90, _problem()) == CONFIGS[3]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sel2(SM90, _problem(m=1024)) == CONFIGS[3]  # warned once only


def test_stale_environment_is_never_used(tmp_path):
    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    store = Store(url)
    store.record(env(template_hash="x" * 32), key(), 2048, CONFIGS[1], p50_ms=1.0)
    store.record(env(nvcc_version="V12.4"), key(), 2048, CONFIGS[2], p50_ms=1.0)
    store.record(env(gpu="h200"), key(), 2048, CONFIGS[3], p50_ms=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert TunedSelector(url, env=env())(SM90, _problem()) is None
    assert store.gc(dry_run=True) == 3


@pytest.mark.parametrize("bad_url", ["sqlite:////nonexistent/dir/x.sqlite", "corrupt",
                                     "postgresql+psycopg://nobody:hunter2@127.0.0.1:1/none"])
def test_unusable_db_falls_back_and_warns_once(tmp_path, bad_url):
    if bad_url == "corrupt":
        path = tmp_path / "corrupt.sqlite"
        path.write_bytes(b"this is not a database" * 100)
        bad_url = f"sqlite:///{path}"
    sel = TunedSelector(bad_url, env=env())
    with pytest.warns(RuntimeWarning, match="unusable") as rec:
        assert sel(SM90, _problem()) is None
    assert "hunter2" not in str(rec[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sel(SM90, _problem(m=64)) is None


def test_passwords_are_never_printed():
    assert "hunter2" not in redact("postgresql://alice:hunter2@db.example:5432/tuning")
    assert "alice" in redact("postgresql://alice:hunter2@db.example:5432/tuning")


def test_upgrade_is_repeatable(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'u.sqlite'}")
    upgrade(engine)
    upgrade(engine)
    with engine.connect() as conn:
        mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
    assert mode == "wal"


def test_default_selector_is_silent_without_a_db_and_can_be_turned_off(tmp_path, monkeypatch):
    from cutlass_nm import dispatch

    monkeypatch.setattr(dispatch, "_selector", None)
    monkeypatch.setenv("CUTLASS_NM_DB", f"sqlite:///{tmp_path / 'never-created.sqlite'}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dispatch._default_selector()(SM90, _problem()) is None
    assert not (tmp_path / "never-created.sqlite").exists()
    monkeypatch.setattr(dispatch, "_selector", None)
    monkeypatch.setenv("CUTLASS_NM_DB", "off")
    assert dispatch._default_selector().user is None  # the DB is off; shipped configs and the model remain


def test_template_hash_is_per_family():
    """A new family or another family's template change must not invalidate a family's records."""
    from cutlass_nm.families import FAMILIES
    from cutlass_nm.store.fingerprint import all_template_hashes, template_hash

    hashes = {name: template_hash(name) for name in FAMILIES}
    assert len(set(hashes.values())) == len(hashes)
    assert all_template_hashes() == set(hashes.values())

"""Tuned records shipped in the package (cutlass_nm/configs/) pass validation and import idempotently."""

import json
from pathlib import Path

import pytest

import cutlass_nm
from cutlass_nm.store.store import Store

RECORDS = sorted((Path(cutlass_nm.__file__).parent / "configs").glob("*.jsonl"))


@pytest.mark.parametrize("path", RECORDS, ids=[p.name for p in RECORDS])
def test_shipped_records_import(tmp_path, path):
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    store = Store(f"sqlite:///{tmp_path / 'x.sqlite'}")
    assert store.merge(lines) == {"new": header["records"], "known": 0, "rejected": 0, "skipped_env": 0}
    assert store.merge(lines)["new"] == 0
    assert store.winners()

"""Shared fixtures and skips: GPU tests need CUDA, compile tests need nvcc."""

from __future__ import annotations

import shutil

import pytest
import torch
from store_helpers import drop_schema, pg_schema_url


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fuzz", type=int, default=40, help="cases of the GPU fuzz test (tests/test_gpu_fuzz.py)")
    parser.addoption("--fuzz-seed", type=int, default=0, help="seed of the GPU fuzz test's cases")
    parser.addoption("--all-compiles", action="store_true",
                     help="also the nvcc checks marked slow_nvcc (more variants of a template; minutes on 2 cores)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    no_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine: pytest -m gpu)")
    no_nvcc = pytest.mark.skip(reason="needs nvcc on PATH (install the CUDA toolkit or set PATH)")
    not_all = pytest.mark.skip(reason="a slower nvcc variant check: run with --all-compiles")
    for item in items:
        if "slow_nvcc" in item.keywords and not config.getoption("--all-compiles"):
            item.add_marker(not_all)
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(no_gpu)
        if "nvcc" in item.keywords and shutil.which("nvcc") is None:
            item.add_marker(no_nvcc)


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    """A private kernel cache folder."""
    monkeypatch.setenv("CUTLASS_NM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    """A tuning-DB URL: a SQLite file, then a fresh schema on the machine's PostgreSQL (skipped without it)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tuning.sqlite'}"
        return
    engine, schema, schema_url = pg_schema_url()
    yield schema_url
    drop_schema(engine, schema)

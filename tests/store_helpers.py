"""Helpers shared by the store tests (kept out of conftest so worker processes can import them)."""

from __future__ import annotations

from cutlass_nm.families import KernelTypes, Problem, get_family
from cutlass_nm.store.fingerprint import EnvFields, ProblemKey

SM90 = get_family("sptc24_sm90")


def env(**over) -> EnvFields:
    base = dict(gpu="h100-80gb-hbm3", compute_capability="9.0a", sm_count=132, l2_bytes=52428800,
                cutlass_version="4.2.0.0", nvcc_version="V13.0.88", template_hash="t" * 32, driver="580.159.04",
                torch_version="2.11.0")
    base.update(over)
    return EnvFields(**base)


def key(m: int = 2048, n: int = 4096, k: int = 4096) -> ProblemKey:
    return ProblemKey.of(SM90.name, Problem(m, n, k, KernelTypes("f16", "f16", False)))


CONFIGS = [SM90.Config(tile_m=tm, tile_n=tn, tile_k=tk) for tm in (128, 256) for tn in (64, 128) for tk in (64, 128)]


def write_many(url: str, worker: int, count: int) -> None:
    """One writer process: ``count`` measurements over a few shared problems, racing the others."""
    from cutlass_nm.store.store import Store

    store = Store(url, create=False)
    for i in range(count):
        store.record(env(), key(m=1 << (i % 4 + 8)), 1 << (i % 4 + 8), CONFIGS[(worker + i) % len(CONFIGS)],
                     p50_ms=1.0 + ((worker * 7919 + i * 104729) % 1000) / 1000.0, iterations=10,
                     study=f"w{worker}", trial=i)


PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def pg_schema_url() -> tuple:
    """(engine, schema, URL of a fresh schema) on the machine's PostgreSQL; skips the test, saying why, without it."""
    import uuid

    import pytest

    try:
        import psycopg  # noqa: F401
        from sqlalchemy import text

        from cutlass_nm.store.db import make_engine

        engine = make_engine(PG_URL)
        schema = f"cnm_{uuid.uuid4().hex[:12]}"
        with engine.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
    except Exception as exc:
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432/test not reachable ({exc.__class__.__name__}); "
                    "these tests need it (trust auth, database 'test')")
    return engine, schema, f"{PG_URL}?options=-csearch_path%3D{schema}"


def drop_schema(engine, schema: str) -> None:
    from sqlalchemy import text

    with engine.begin() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    engine.dispose()


"""The tuning-DB lookup's cost (CPU): what a problem's first ``matmul`` call pays to ask the database.

    python3 benchmarks/bench_dispatch.py --out dispatch.json

A SQLite tuning DB with 256 winners; the first lookup reads them (I/O, once), repeated lookups are memoized.
Medians of several batches. The host time of every later call is ``bench_host.py``'s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def _per_call_us(fn, calls: int, batches: int = 7) -> float:
    fn()
    samples = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def lookup_costs() -> dict:
    from cutlass_nm.families import KernelTypes, Problem, get_family
    from cutlass_nm.store.fingerprint import EnvFields, ProblemKey
    from cutlass_nm.store.lookup import TunedSelector
    from cutlass_nm.store.store import Store

    sm90 = get_family("sptc24_sm90")
    types = KernelTypes("f16", "f16", False)
    # a synthetic H100 environment: the lookup's cost does not depend on whose records they are
    env = EnvFields(gpu="h100-80gb-hbm3", compute_capability="9.0a", sm_count=132, l2_bytes=52428800,
                    cutlass_version="4.2.0.0", nvcc_version="V13.0.88", template_hash="t" * 32,
                    driver="580.159.04", torch_version="2.11.0")
    configs = [sm90.Config(tile_m=tm, tile_n=tn, tile_k=tk)
               for tm in (128, 256) for tn in (64, 128) for tk in (64, 128)]

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/t.sqlite"
        store = Store(url)
        for i in range(256):
            m, n = 1 << (i % 8 + 4), 1024 * (i // 8 + 1)
            store.record(env, ProblemKey.of(sm90.name, Problem(m, n, 4096, types)), m, configs[i % len(configs)],
                         p50_ms=1.0)
        sel = TunedSelector(url, env=env)
        problem = Problem(2048, 4096, 4096, types)
        t0 = time.perf_counter()
        first = sel(sm90, problem)
        first_ms = (time.perf_counter() - t0) * 1e3
        repeat_us = _per_call_us(lambda: sel(sm90, problem), 100_000)
    return {"winners_in_db": 256, "first_lookup_ms": first_ms, "repeated_lookup_us": repeat_us,
            "found": first is not None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write the result JSON here")
    args = ap.parse_args()
    from cutlass_nm.bench.env import environment

    result = {"environment": environment(), "lookup": lookup_costs()}
    print("lookup:", json.dumps(result["lookup"]))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

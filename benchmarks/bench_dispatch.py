"""Dispatch costs: the tuning-DB lookup (CPU) and matmul's overhead over a raw launch (GPU).

    python3 benchmarks/bench_dispatch.py --out dispatch.json

Lookup: a SQLite tuning DB with 256 winners; the first lookup reads them (I/O, once), repeated
lookups are memoized. Overhead: host time per call of ``cutlass_nm.matmul`` (input checks, key,
dict lookup, launch) minus that of calling the same compiled kernel's launcher directly, on a
problem small enough that the host, not the GPU, sets the pace. Medians of several batches.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def _per_call_us(fn, calls: int, batches: int = 7, sync=None) -> float:
    fn()
    samples = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if sync:
            sync()
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


def overhead_costs() -> dict:
    import torch

    import cutlass_nm
    from cutlass_nm.dispatch import _RESOLVED

    m, n, k = 8, 256, 256
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w, _ = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16))
    y = torch.empty(m, n, device="cuda", dtype=torch.float16)
    cutlass_nm.matmul(x, w, out=y)
    (kernel,) = list(_RESOLVED.values())
    torch.cuda.synchronize()
    sync = torch.cuda.synchronize
    raw = _per_call_us(lambda: kernel(x, w, None, y), 2000, sync=sync)
    full = _per_call_us(lambda: cutlass_nm.matmul(x, w, out=y), 2000, sync=sync)
    full_alloc = _per_call_us(lambda: cutlass_nm.matmul(x, w), 2000, sync=sync)
    wd = w.to_dense()
    torch_mm = _per_call_us(lambda: torch.mm(x, wd.T, out=y), 2000, sync=sync)
    return {"shape": [m, n, k], "raw_launch_us": raw, "matmul_out_us": full, "matmul_alloc_us": full_alloc,
            "dispatch_overhead_us": full - raw, "torch_mm_us": torch_mm}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write the result JSON here")
    args = ap.parse_args()
    from cutlass_nm.bench.env import environment

    result = {"environment": environment(), "lookup": lookup_costs()}
    print("lookup:", json.dumps(result["lookup"]))
    import torch

    if torch.cuda.is_available():
        result["overhead"] = overhead_costs()
        print("overhead:", json.dumps(result["overhead"]))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

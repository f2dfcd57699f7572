"""Compile, in parallel and without a GPU, every kernel tests/test_gpu_nm_simt.py runs (its ``kernel_ids``), so a
device call loads them from a carried cache instead of compiling them there.

    CUTLASS_NM_CACHE=$PWD/.kcache python3 benchmarks/precompile_simt_tests.py
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from cutlass_nm.kernels import precompile


def main() -> None:
    spec = importlib.util.spec_from_file_location("t", Path(__file__).parents[1] / "tests" / "test_gpu_nm_simt.py")
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    kids = t.kernel_ids()
    t0 = time.time()
    bad = [r for r in precompile(kids) if isinstance(r, Exception)]
    print(f"precompiled {len(kids)} nm_simt test kernels in {time.time() - t0:.0f} s, {len(bad)} failed", flush=True)
    for err in bad:
        print("  failed:", str(err)[:300])


if __name__ == "__main__":
    main()

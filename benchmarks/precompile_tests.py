"""Compile, in parallel and without a GPU, the kernels a GPU test module runs, so a device call loads them from a
carried cache (``CUTLASS_NM_CACHE``) instead of compiling them there. A module lists its kernels in
``kernel_ids()``; precompile_decode_tests.py builds its list from the decode module's variant tables.

    CUTLASS_NM_CACHE=$PWD/.kcache python3 benchmarks/precompile_tests.py test_gpu_nm_simt
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path
from types import ModuleType

from cutlass_nm.kernels import precompile


def test_module(name: str) -> ModuleType:
    """tests/<name>.py, imported without pytest."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(kids: list, what: str) -> None:
    """Compile ``kids`` in parallel; print how many, how long, and every failure."""
    t0 = time.time()
    bad = [r for r in precompile(kids) if isinstance(r, Exception)]
    print(f"precompiled {len(kids)} {what} in {time.time() - t0:.0f} s, {len(bad)} failed", flush=True)
    for err in bad:
        print("  failed:", str(err)[:300])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("module", help="a test module under tests/ with kernel_ids(), e.g. test_gpu_nm_simt")
    args = ap.parse_args()
    build(test_module(args.module).kernel_ids(), f"{args.module} kernels")


if __name__ == "__main__":
    main()

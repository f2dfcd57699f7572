"""Baselines timed in the same run: cuBLAS dense (torch.mm) and cuSPARSELt 2:4 (torch._cslt_*).

cuSPARSELt runs in a child process (``python -m cutlass_nm.bench.baselines``): on this stack some of
its algorithms fault with an illegal instruction, which would poison the benchmark's own context.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import torch


def cublas_dense(xs: list[torch.Tensor], ws: list[torch.Tensor]) -> Callable[[int], object]:
    """y = x @ W.T through cuBLAS."""
    return lambda i: torch.mm(xs[i], ws[i].T)


def cusparselt(xs: list[torch.Tensor], ws: list[torch.Tensor], search: bool) -> Callable[[int], object]:
    """y = (W @ x.T).T through cuSPARSELt; with ``search``, ``_cslt_sparse_mm_search`` picks the algorithm."""
    comp = [torch._cslt_compress(w) for w in ws]
    alg = torch._cslt_sparse_mm_search(comp[0], xs[0].T, transpose_result=True) if search else 0
    return lambda i: torch._cslt_sparse_mm(comp[i], xs[i].T, transpose_result=True, alg_id=alg)


def cusparselt_isolated(m: int, n: int, k: int, dtype: str, reps: int) -> dict[str, dict]:
    """Time cuSPARSELt (default and searched algorithm) in a child process; errors come back as rows."""
    out = {}
    for search in (False, True):
        name = "cusparselt_search" if search else "cusparselt_default"
        proc = subprocess.run([sys.executable, "-m", "cutlass_nm.bench.baselines", str(m), str(n), str(k), dtype,
                               str(reps), str(int(search))], capture_output=True, text=True, timeout=900)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode == 0 and lines:
            out[name] = json.loads(lines[-1])
        else:
            out[name] = {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return out


def _child(m: int, n: int, k: int, dtype: str, reps: int, search: bool) -> None:
    from .timing import copies_to_rotate, time_rotating

    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    from ..formats import prune_24

    copies = copies_to_rotate((m * k + n * k) * 2)
    xs = [torch.randn(m, k, device="cuda", dtype=dt) for _ in range(copies)]
    ws = [prune_24(torch.randn(n, k, device="cuda", dtype=dt)) for _ in range(copies)]
    fn = cusparselt(xs, ws, search)
    y = fn(0)
    torch.cuda.synchronize()
    ref = xs[0].double() @ ws[0].double().T
    err = ((y.double() - ref).norm() / ref.norm()).item()
    t = time_rotating(fn, copies, reps=reps)
    print(json.dumps({"median_ms": t.p50_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms, "reps": t.reps,
                      "rel_err": err}))


if __name__ == "__main__":
    a = sys.argv[1:]
    _child(int(a[0]), int(a[1]), int(a[2]), a[3], int(a[4]), bool(int(a[5])))

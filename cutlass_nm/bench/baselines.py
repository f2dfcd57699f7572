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


MODES = ("cusparselt_default", "cusparselt_search", "torch_semi_structured")


def cusparselt(xs: list[torch.Tensor], ws: list[torch.Tensor], mode: str) -> Callable[[int], object]:
    """W @ xᵀ through cuSPARSELt, three ways.

    ``cusparselt_default``/``_search``: ``torch._cslt_sparse_mm`` on a contiguous xᵀ (prepared outside
    the timed region, which favours the baseline), with algorithm 0 or with the (alg, split_k,
    split_k_mode) that ``torch._C._cusparselt.mm_search`` picks. ``torch_semi_structured``: what a
    torch user writes, ``F.linear(x, to_sparse_semi_structured(W))``. (Passing the transposed view
    ``x.T`` to ``_cslt_sparse_mm`` takes ~250 ms per call on this stack, so it is not used.)
    """
    if mode == "torch_semi_structured":
        from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured

        SparseSemiStructuredTensor._FORCE_CUTLASS = False
        sw = [to_sparse_semi_structured(w) for w in ws]
        return lambda i: torch.nn.functional.linear(xs[i], sw[i])
    comp = [torch._cslt_compress(w) for w in ws]
    xts = [x.T.contiguous() for x in xs]
    alg, split_k, split_k_mode = 0, 1, -1
    if mode == "cusparselt_search":
        alg, split_k, split_k_mode, _ = torch._C._cusparselt.mm_search(comp[0], xts[0], None, None, None, False)
    return lambda i: torch._cslt_sparse_mm(comp[i], xts[i], alg_id=alg, split_k=split_k, split_k_mode=split_k_mode)


def cusparselt_isolated(m: int, n: int, k: int, dtype: str, reps: int, modes: tuple[str, ...] = MODES
                        ) -> dict[str, dict]:
    """Time each cuSPARSELt mode (of ``MODES``) in a child process; errors come back as rows."""
    out = {}
    for name in modes:
        proc = subprocess.run([sys.executable, "-m", "cutlass_nm.bench.baselines", str(m), str(n), str(k), dtype,
                               str(reps), name], capture_output=True, text=True, timeout=900)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode == 0 and lines:
            out[name] = json.loads(lines[-1])
        else:
            out[name] = {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return out


def _child(m: int, n: int, k: int, dtype: str, reps: int, mode: str) -> None:
    from ..timing import copies_to_rotate, time_rotating

    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    from ..formats import prune_24

    copies = copies_to_rotate((m * k + n * k) * 2)
    xs = [torch.randn(m, k, device="cuda", dtype=dt) for _ in range(copies)]
    ws = [prune_24(torch.randn(n, k, device="cuda", dtype=dt)) for _ in range(copies)]
    fn = cusparselt(xs, ws, mode)
    y = fn(0)
    torch.cuda.synchronize()
    ref = xs[0].double() @ ws[0].double().T
    if mode != "torch_semi_structured":  # _cslt_sparse_mm returns W @ xᵀ (n x m); compare its transpose
        y = y.T
    err = ((y.double() - ref).norm() / ref.norm()).item()
    t = time_rotating(fn, copies, reps=reps)
    print(json.dumps({"median_ms": t.p50_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms, "reps": t.reps, "timing": t.method,
                      "rel_err": err}))


if __name__ == "__main__":
    a = sys.argv[1:]
    _child(int(a[0]), int(a[1]), int(a[2]), a[3], int(a[4]), a[5])

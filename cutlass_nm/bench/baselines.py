"""Baselines timed in the same run: cuBLAS dense (torch.mm) and cuSPARSELt 2:4 (torch._cslt_*)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def cublas_dense(xs: list[torch.Tensor], ws: list[torch.Tensor]) -> Callable[[int], object]:
    """y = x @ W.T through cuBLAS."""
    return lambda i: torch.mm(xs[i], ws[i].T)


def cusparselt(xs: list[torch.Tensor], ws: list[torch.Tensor], search: bool = True) -> Callable[[int], object] | None:
    """y = (W @ x.T).T through cuSPARSELt, after ``_cslt_sparse_mm_search`` picks the algorithm.

    Returns None when this torch build has no cuSPARSELt.
    """
    if not hasattr(torch, "_cslt_compress"):
        return None
    try:
        comp = [torch._cslt_compress(w) for w in ws]
        alg = 0
        if search:
            alg = torch._cslt_sparse_mm_search(comp[0], xs[0].T, transpose_result=True)
            if isinstance(alg, tuple):
                alg = alg[0]
        return lambda i: torch._cslt_sparse_mm(comp[i], xs[i].T, transpose_result=True, alg_id=alg)
    except (RuntimeError, TypeError):
        return None

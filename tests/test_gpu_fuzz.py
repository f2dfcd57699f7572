"""Random problems through ``cutlass_nm.matmul`` against an fp64 reference, NaN-poisoned outputs.

``pytest -m gpu tests/test_gpu_fuzz.py --fuzz 1000 --fuzz-seed 0`` draws the cases (tests/fuzz_cases.py). A case the
library refuses must be refused with a ``CutlassNMError`` (a clear message): it passes, and is counted by reason in
the JSONL file ``$CUTLASS_NM_FUZZ_LOG`` names (one line per case), next to the errors of the cases that ran.
"""

from __future__ import annotations

import json
import os
import re

import pytest
import torch
from fuzz_cases import FuzzCase, fuzz_cases

import cutlass_nm
from cutlass_nm import CutlassNMError

pytestmark = pytest.mark.gpu
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
TOL = {"f16": 4e-3, "bf16": 1.6e-2, "f32": 1e-4}  # by output type: its rounding dominates


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fuzz_case" in metafunc.fixturenames:
        cases = fuzz_cases(metafunc.config.getoption("--fuzz"), metafunc.config.getoption("--fuzz-seed"))
        metafunc.parametrize("fuzz_case", cases, ids=[c.id for c in cases])


def _kernel_id(c: FuzzCase):
    """The kernel matmul will pick for ``c`` (the untuned path), or None where it will refuse."""
    from cutlass_nm.families import KernelTypes, Problem, get_family
    from cutlass_nm.formats import weight_class
    from cutlass_nm.patterns import Pattern
    from cutlass_nm.routing import default_family

    try:
        p = Pattern.parse(c.pattern)
        vector = 32 if c.kind == "nm" else 0
        fam = get_family(default_family(torch.device("cuda"), weight_class(p), c.m, DTYPES[c.dtype], p, vector))
        types = KernelTypes(c.dtype, c.out_dtype, c.bias)
        problem = Problem(c.m, c.n, c.k, types, c.pattern, vector)
        cfg = fam.heuristic(problem)
    except Exception:  # refused on the way: the test checks that the refusal is a clear one
        return []
    if c.dtype not in fam.input_dtypes or fam.check(cfg, problem) is not None:
        return []
    return [(fam.name, cfg, types), *fam.helpers(cfg, types)]


@pytest.fixture(scope="module", autouse=True)
def _precompile(request: pytest.FixtureRequest):
    """Every kernel the cases reach, built at once on all cores (the untuned path: no tuning DB)."""
    from cutlass_nm import dispatch
    from cutlass_nm.kernels import precompile

    dispatch.set_selector(lambda family, problem: None)
    cases = fuzz_cases(request.config.getoption("--fuzz"), request.config.getoption("--fuzz-seed"))
    kids = sorted({kid for c in cases for kid in _kernel_id(c)}, key=str)
    failures = [r for r in precompile(kids) if isinstance(r, Exception)]
    yield
    dispatch.set_selector(None)
    assert not failures, failures[0]


def _log(row: dict) -> None:
    path = os.environ.get("CUTLASS_NM_FUZZ_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def _reason(exc: Exception) -> str:
    """The refusal's rule, without its numbers: what the per-reason count groups by."""
    return f"{type(exc).__name__}: {re.sub(r'[0-9]+', 'N', str(exc))[:110]}"


def test_fuzz_matches_fp64_reference(fuzz_case: FuzzCase) -> None:
    c = fuzz_case
    g = torch.Generator(device="cuda").manual_seed(c.seed)
    dtype, out_dtype = DTYPES[c.dtype], DTYPES[c.out_dtype]
    x = torch.randn(c.m, c.k, device="cuda", dtype=dtype, generator=g)
    dense = torch.randn(c.n, c.k, device="cuda", dtype=dtype, generator=g)
    bias = torch.randn(c.n, device="cuda", dtype=dtype, generator=g) if c.bias else None
    row = {"case": c.id, "pattern": c.pattern, "m": c.m, "n": c.n, "k": c.k, "dtype": c.dtype,
           "out_dtype": c.out_dtype, "bias": c.bias}
    stage = "prune"
    try:
        w, _ = cutlass_nm.prune(dense, c.pattern)
        stage = "matmul"
        y = torch.full((c.m, c.n), float("nan"), device="cuda", dtype=out_dtype)
        cutlass_nm.matmul(x, w, bias, out_dtype=out_dtype, out=y)
        torch.cuda.synchronize()
    except CutlassNMError as exc:  # refused: fine when the message is a clear one
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        _log({**row, "status": "refused", "stage": stage, "reason": _reason(exc)})
        return
    ref = x.double() @ w.to_dense().double().T
    if bias is not None:
        ref += bias.double()
    err = ((y.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    ok = bool(torch.isfinite(y).all()) and err < TOL[c.out_dtype]
    _log({**row, "status": "ok" if ok else "wrong", "rel_err": err})
    assert ok, f"{c.id}: relative error {err:.2e} (NaN left: {not bool(torch.isfinite(y).all())})"

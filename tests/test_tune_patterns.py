"""Tuned winners are kept per sparsity pattern: the problem, its DB key and its study all carry it (CPU)."""

from __future__ import annotations

import pytest
import torch
from tune_helpers import env

from cutlass_nm import set_selector
from cutlass_nm.dispatch import _resolve
from cutlass_nm.families import KernelTypes, Problem
from cutlass_nm.formats.vnm import VNMWeight
from cutlass_nm.patterns import Pattern
from cutlass_nm.store.fingerprint import ProblemKey
from cutlass_nm.tune.tuner import study_name


class _Seen(Exception):
    pass


def test_problem_key_and_study_carry_the_pattern():
    t = KernelTypes("f16", "f16", False)
    p8, p16 = Problem(2048, 4096, 4096, t, "128:2:8"), Problem(2048, 4096, 4096, t, "128:2:16")
    assert ProblemKey.of("vnm_sm90", p8).pattern == "128:2:8"
    assert ProblemKey.of("vnm_sm90", p8) != ProblemKey.of("vnm_sm90", p16)
    assert study_name("vnm_sm90", p8, env()) != study_name("vnm_sm90", p16, env())
    assert Problem(1, 2, 3, t).pattern == "2:4"  # the default keeps 2:4 records valid


def test_dispatch_asks_the_selector_with_the_weights_pattern():
    seen = []

    def selector(family, problem):
        seen.append((family.name, problem.pattern))
        raise _Seen

    set_selector(selector)
    try:
        key = (2048, 4096, 4096, torch.float16, torch.float16, False, torch.device("cpu"), "vnm_sm90", VNMWeight,
               Pattern.parse("128:2:16"), 0)
        with pytest.raises(_Seen):
            _resolve(key)
    finally:
        set_selector(None)
    assert seen == [("vnm_sm90", "128:2:16")]


@pytest.mark.parametrize("pattern", ["2:4", "128:2:8", "2:8"])
def test_every_weight_type_names_its_pattern(pattern):
    """matmul's dispatch key reads ``w.pattern`` from every weight type."""
    import cutlass_nm

    w, _ = cutlass_nm.prune(torch.randn(128, 256, dtype=torch.float16), pattern)
    assert str(w.pattern) == pattern

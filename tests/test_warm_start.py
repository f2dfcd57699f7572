"""The tuner's warm start ranks a family's candidate list with families.perfmodel before measuring anything: every
family's configs need an estimate, and the candidate list is a bounded sample of the space, never its product."""

from __future__ import annotations

import math

import pytest

from cutlass_nm.families import FAMILIES, KernelTypes, Problem, get_family, perfmodel
from cutlass_nm.families.base import CANDIDATES

F16 = KernelTypes("f16", "f16", False)
PROBLEMS = {
    "sptc24_sm90": Problem(2048, 4096, 4096, F16, "2:4"),
    "sptc24_sm80": Problem(2048, 4096, 4096, F16, "2:4"),
    "vnm_sm90": Problem(2048, 4096, 11008, F16, "128:2:8"),
    "vnm_sm80": Problem(2048, 4096, 4096, F16, "128:2:8"),
    "vnm_glu_sm90": Problem(2048, 22016, 4096, F16, "256:2:8"),
    "nm_simt": Problem(2048, 4096, 4096, KernelTypes("f32", "f32", False), "2:8"),
    "nm_decode": Problem(4, 4096, 4096, F16, "2:8", 32),
    "nm_decode_simt": Problem(4, 4096, 4096, F16, "2:8", 1),
    "decode24": Problem(4, 4096, 4096, F16, "2:4"),
    "sptc24_fp8_sm90": Problem(2048, 4096, 4096, KernelTypes("e4m3", "bf16", False), "2:4"),
    "decode24_fp8": Problem(1, 4096, 4096, KernelTypes("bf16", "bf16", False), "2:4"),
    "nm_decode_fp8": Problem(1, 4096, 4096, KernelTypes("e4m3", "bf16", False), "128:2:8"),
    "vnm_fp8_sm90": Problem(2048, 4096, 4096, KernelTypes("e4m3", "bf16", False), "128:2:8"),
}


def test_every_family_has_a_problem_here():
    assert set(PROBLEMS) == set(FAMILIES)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_every_family_ranks_its_candidates(name):
    problem = PROBLEMS[name]
    family = FAMILIES[name]
    configs = family.candidates(problem)
    assert configs, f"{name}: no valid config for {problem}"
    assert len(configs) <= CANDIDATES + 1 and configs[0] == family.heuristic(problem)
    assert all(family.check(c, problem) is None for c in configs)
    assert configs == family.candidates(problem)  # seeded: the same list every time
    ranked = perfmodel.rank(configs, problem)
    est = [perfmodel.estimate_ms(c, problem) for c in ranked]
    assert all(math.isfinite(e) and e > 0 for e in est)
    assert est == sorted(est)


def test_vnm_sm90_model_prefers_what_the_h100_measured():
    """An ordering the H100 measured: 6 stages of 64 columns beat 4 (0.397 vs 0.442 ms)."""
    glu = get_family("vnm_glu_sm90")
    problem = PROBLEMS["vnm_glu_sm90"]
    base = glu.Config(tile_k=64, stages=6, raster=0)
    worse = [glu.Config(tile_k=64, stages=4, raster=0)]
    for cfg in worse:
        assert perfmodel.estimate_ms(base, problem) < perfmodel.estimate_ms(cfg, problem), cfg


def test_vnm_sm90_tile_m_256_needs_256_row_blocks():
    sm90 = get_family("vnm_sm90")
    cfg = sm90.Config(tile_m=256, tile_n=128, consumers=2)
    assert "256-row V-blocks" in sm90.check(cfg, Problem(2048, 4096, 4096, F16, "128:2:8"))
    assert sm90.check(cfg, Problem(2048, 4096, 4096, F16, "256:2:8")) is None

"""The FP8 (e4m3) 2:4 family's kernels compile with their scale epilogue, with and without a bias (nvcc, CPU only)."""

import ctypes

import pytest

from cutlass_nm.families import KernelTypes, Problem, get_family
from cutlass_nm.kernels import precompile

pytestmark = [pytest.mark.nvcc, pytest.mark.slow_nvcc]


def test_fp8_heuristic_kernels_compile(isolated_cache):
    fam = get_family("sptc24_fp8_sm90")
    kids = [("sptc24_fp8_sm90", fam.heuristic(Problem(m, 4096, 4096, types)), types)
            for m, types in ((16, KernelTypes("e4m3", "bf16", False)), (4096, KernelTypes("e4m3", "f16", True)))]
    built = precompile(kids, workers=2)
    assert all(not isinstance(r, Exception) for r in built), built
    for artifact in built:
        lib = ctypes.CDLL(str(artifact.path))
        assert lib.cnm_abi_version() == 2
        assert lib.cnm_meta_atom_k() == 128  # min(tile_k, 128): both heuristic tiles

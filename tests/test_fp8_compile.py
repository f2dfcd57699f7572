"""The FP8 (e4m3) 2:4 sm90 template compiles with its scale epilogue, with and without a bias (nvcc, CPU only)."""

import ctypes
from string import Template

import pytest

from cutlass_nm.build import build
from cutlass_nm.codegen.cutlass_emit import CPP_TYPES, emit_sm90, sm90_sparse_fp8_operation
from cutlass_nm.families.base import package_file

pytestmark = [pytest.mark.nvcc, pytest.mark.slow_nvcc]


@pytest.mark.parametrize("bias", [False, True])
def test_fp8_template_compiles(isolated_cache, bias):
    tile = (128, 128, 128)
    op = sm90_sparse_fp8_operation(tile=tile, cluster=(2, 1), schedule="cooperative", out_dtype="bf16")
    template = Template(package_file("families/sptc24_sm90/kernel_fp8.cu").read_text())
    source = emit_sm90(op, template, tile_shape="cute::Shape<cute::_128, cute::_128, cute::_128>",
                       element_d=CPP_TYPES["bf16"], element_bias=CPP_TYPES["bf16"],
                       has_bias="true" if bias else "false")
    lib = ctypes.CDLL(str(build(source, "sm_90a", f"fp8_probe_{bias}").path))
    assert lib.cnm_abi_version() == 1
    assert lib.cnm_meta_atom_k() > 0

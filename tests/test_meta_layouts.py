"""The sm90 metadata layout we compute in Python equals CUTLASS's own (CuTe, compiled by nvcc)."""

import subprocess
from pathlib import Path

import pytest
import torch

from cutlass_nm.build.compiler import cutlass_include_dirs, nvcc_path
from cutlass_nm.formats import meta_sm90

pytestmark = pytest.mark.nvcc


@pytest.fixture(scope="module")
def cute_layout_tool(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("layout") / "sm90_meta_layout"
    src = Path(__file__).parent / "cpp" / "sm90_meta_layout.cu"
    cmd = [nvcc_path(), "-std=c++17", "-O1", *[f"-I{d}" for d in cutlass_include_dirs()], str(src), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    return exe


@pytest.mark.parametrize(("rows", "k", "atom_k"), [(64, 64, 64), (200, 336, 128), (64, 96, 32), (130, 256, 64),
                                                   (7, 48, 128), (192, 1040, 64)])
def test_sm90_byte_offsets_match_cute(cute_layout_tool, rows, k, atom_k):
    out = subprocess.run([str(cute_layout_tool), str(rows), str(k), str(atom_k)], capture_output=True, text=True,
                         check=True).stdout.split()
    cute = torch.tensor([int(v) for v in out]).view(-1, 3)
    assert len(cute) == rows * (-(-k // 8))
    offsets = meta_sm90.byte_offsets(*meta_sm90.padded_shape(rows, k, atom_k), atom_k)
    assert torch.equal(offsets[cute[:, 0], cute[:, 1] // 8], cute[:, 2])


@pytest.mark.parametrize(("rows", "k", "atom_k"), [(64, 128, 64), (200, 336, 128), (130, 256, 64), (7, 48, 128)])
def test_sm90_fp8_byte_offsets_match_cute(cute_layout_tool, rows, k, atom_k):
    out = subprocess.run([str(cute_layout_tool), str(rows), str(k), str(atom_k), "8"], capture_output=True,
                         text=True, check=True).stdout.split()
    cute = torch.tensor([int(v) for v in out]).view(-1, 3)
    assert len(cute) == rows * (-(-k // 8))
    offsets = meta_sm90.byte_offsets(*meta_sm90.padded_shape(rows, k, atom_k), atom_k, bits=8)
    assert torch.equal(offsets[cute[:, 0], cute[:, 1] // 8], cute[:, 2])

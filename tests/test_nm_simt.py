"""nm_simt on the CPU: config space and validity, records, the kernel layout, fp32 routing and refusals."""

from __future__ import annotations

import pytest
import torch

import cutlass_nm
from cutlass_nm import ConfigError, InputError
from cutlass_nm.dispatch import default_family
from cutlass_nm.families import FAMILIES, KernelTypes, Problem
from cutlass_nm.families.nm_simt import FAMILY, Config, kgroups_for, simt_layout, smem_bound
from cutlass_nm.formats.nm import NMWeight, compress_nm
from cutlass_nm.tune.space import all_configs

F32 = KernelTypes("f32", "f32", False)
LLAMA = [(m, n, k) for m in (256, 512, 1024, 2048, 4096) for n, k in ((4096, 4096), (12288, 4096), (11008, 4096),
                                                                      (4096, 11008))]


def test_registered_and_space_is_discrete_ints():
    assert FAMILIES["nm_simt"] is FAMILY and FAMILY.weight is NMWeight
    for values in Config.SPACE.values():
        assert values and all(type(v) is int for v in values)


@pytest.mark.parametrize("types", [F32, KernelTypes("f16", "f16", True), KernelTypes("bf16", "f32", False)])
def test_heuristic_is_valid(types):
    for m, n, k in [*LLAMA, (17, 1000, 1003), (1, 64, 7)]:
        p = Problem(m, n, k, types)
        assert FAMILY.check(FAMILY.heuristic(p), p) is None


def test_check_rejects_impossible_configs():
    p = Problem(256, 4096, 4096, F32)
    assert "warps" in FAMILY.check(Config(block_tokens=32, thread_tokens=8), p)
    assert "threads" in FAMILY.check(Config(block_rows=256, block_tokens=256, thread_rows=4, thread_tokens=4), p)
    big = Config(block_rows=128, block_tokens=256, thread_tokens=16, k_cols=128, stages=5)
    assert "register" in FAMILY.check(Config(block_rows=256, block_tokens=256, thread_tokens=16), p)
    assert smem_bound(big) > 227 * 1024 and "shared memory" in FAMILY.check(big, p)
    # the bound follows the pattern's k-tile: long k-tiles fit at high sparsity, not at 2:4
    long_k = Config(block_rows=256, block_tokens=64, k_cols=128, x_transposed=1)
    assert FAMILY.check(long_k, Problem(256, 4096, 4096, F32, "1:8")) is None
    assert "shared memory" in FAMILY.check(long_k, Problem(256, 4096, 4096, F32, "2:4"))
    assert smem_bound(long_k, "1:8") < smem_bound(long_k, "2:4") <= smem_bound(long_k)
    assert "output" in FAMILY.check(Config(), Problem(256, 64, 64, KernelTypes("f32", "f16", False)))
    valid = all_configs(FAMILY, p)
    assert Config() in valid and 100 < len(valid) < 10000


def test_from_record_is_strict():
    cfg = Config(block_rows=64, split_k=4)
    assert Config.from_record(cfg.to_record()) == cfg
    for bad in ({"block_rows": 48}, {"stages": "3"}, {"split_k": True}, {"tile": 1}):
        with pytest.raises(ConfigError):
            Config.from_record(bad)


@pytest.mark.parametrize(("m", "k_cols", "groups"), [(32, 32, 1), (4, 32, 8), (7, 32, 4), (5, 32, 4), (64, 32, 1),
                                                      (3, 16, 4), (2, 16, 8), (9, 16, 1)])
def test_kgroups(m, k_cols, groups):
    assert kgroups_for(m, k_cols) == groups


@pytest.mark.parametrize("pattern", ["2:4", "3:7", "16:32", "5:16", "31:64"])
@pytest.mark.parametrize("vector", [1, 8, 64])
def test_layout_reconstructs_the_weight(pattern, vector):
    rows, k = 100, 203
    w = compress_nm(torch.randn(rows, k), pattern, vector, prune=True)  # 2:4 too, as general N:M
    kg = kgroups_for(w.pattern.m, 32)
    wt, cols, n_pad, nnz_pad = simt_layout(w, kg)
    n, m = w.pattern.n, w.pattern.m
    assert wt.shape == (nnz_pad, n_pad) and cols.shape == (n_pad // vector, nnz_pad) and nnz_pad % (kg * n) == 0
    assert int(cols.max()) < kg * m  # every column lies inside its k-tile
    j = torch.arange(nnz_pad)
    k_index = (j // (kg * n)) * kg * m + cols.long()  # (n_pad / vector, nnz_pad) absolute columns
    dense = torch.zeros(n_pad, nnz_pad // n * m + kg * m)
    dense.scatter_add_(1, k_index.repeat_interleave(vector, 0), wt.T)
    assert torch.equal(dense[:rows, :k], w.to_dense().float())
    assert dense[rows:].abs().sum() == 0 and dense[:, k:].abs().sum() == 0


@pytest.mark.parametrize("name", ["sptc24_sm90", "sptc24_sm80", "vnm_sm90", "nm_decode"])
def test_half_families_reject_fp32_in_check(name):
    fam = FAMILIES[name]
    assert "fp16/bf16" in fam.check(fam.Config(), Problem(256, 4096, 4096, F32))


def test_dispatch_refuses_fp32_for_every_family_but_simt():
    from cutlass_nm.dispatch import _resolve

    for name, fam in FAMILIES.items():
        if "f32" in getattr(fam, "input_dtypes", ()):
            continue
        key = (32, 256, 512, torch.float32, torch.float32, False, torch.device("cpu"), name, fam.weight, "2:4")
        with pytest.raises(InputError, match=r"inputs, got torch\.float32"):
            _resolve(key)


def test_fp32_routing_and_refusals():
    assert default_family(torch.device("cpu"), NMWeight, 3, torch.float32) == "nm_simt"
    assert default_family(torch.device("cpu"), NMWeight, 3, torch.float16) == "nm_decode"
    assert default_family(torch.device("cpu"), NMWeight, 17, torch.float16) == "nm_simt"
    w24 = cutlass_nm.compress(torch.randn(256, 512, dtype=torch.float32), "2:4", prune=True)
    with pytest.raises(InputError, match="float16 or bfloat16"):
        cutlass_nm.matmul(torch.randn(4, 512), w24)
    with pytest.raises(InputError, match="float64"):
        cutlass_nm.matmul(torch.randn(4, 512, dtype=torch.float64), w24)


@pytest.mark.nvcc
def test_source_compiles(isolated_cache):
    from cutlass_nm.kernels import precompile

    kids = [(FAMILY.name, Config(split_k=2), KernelTypes("bf16", "f32", True))]
    assert not [r for r in precompile(kids, workers=1) if isinstance(r, Exception)]

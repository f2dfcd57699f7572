"""2:4 weights on the decode path (decode24) on the GPU: values and meta read in place, m = 1..16, tails in n,
fp16 and bf16, bias, f32 output, poisoned outputs, fp64 references."""

from __future__ import annotations

import pytest
import torch

import cutlass_nm
from cutlass_nm.formats import Sparse24Weight, compress_24

pytestmark = pytest.mark.gpu
TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
FAM = cutlass_nm.families.get_family("decode24")


def _case(m: int, n: int, k: int, dtype: torch.dtype, seed: int, with_bias: bool):
    """x (m x k), a 2:4-pruned weight (n x k), an optional bias, and x·Wᵀ + bias in fp64."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    w = compress_24(torch.randn(n, k, device="cuda", dtype=dtype, generator=g), prune=True)
    bias = torch.randn(n, device="cuda", dtype=dtype, generator=g) if with_bias else None
    ref = x.double() @ w.to_dense().double().T
    return x, w, bias, ref if bias is None else ref + bias.double()


def _run(x, w, bias, out_dtype: torch.dtype, cfg=None) -> torch.Tensor:
    """decode24 forced (with ``cfg`` where given) into a NaN-poisoned output."""
    out = torch.full((x.shape[0], w.out_features), float("nan"), device="cuda", dtype=out_dtype)
    if cfg is None:
        return cutlass_nm.matmul(x, w, bias, out=out, family=FAM.name)
    refused = []

    def select(family, problem):
        refused.append(family.check(cfg, problem))
        return cfg

    cutlass_nm.set_selector(select)
    try:
        y = cutlass_nm.matmul(x, w, bias, out=out, family=FAM.name)
    finally:
        cutlass_nm.set_selector(None)
    assert refused and not any(refused), refused  # the config under test is the one that ran
    return y


def _check(y: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    torch.cuda.synchronize()
    assert torch.isfinite(y).all()
    assert ((y.double() - ref).norm() / ref.norm()).item() < TOL[dtype]


@pytest.mark.parametrize("n,k", [(1000, 1008), (4096, 4096), (520, 11008), (64, 16384), (11008, 4096)])
@pytest.mark.parametrize("m", [1, 2, 5, 16])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_decode24_matches_reference(n, k, m, dtype, with_bias):
    """The heuristic's kernel: n not a multiple of the block rows (1000, 520), split-K clusters (64 x 16384,
    4096²), one token on the byte-permute path and several on staged x."""
    x, w, bias, ref = _case(m, n, k, dtype, seed=m * 7 + n, with_bias=with_bias)
    _check(_run(x, w, bias, dtype), ref, dtype)


@pytest.mark.parametrize("m", [1, 5, 16])
def test_decode24_f32_output(m):
    x, w, bias, ref = _case(m, 1000, 4096, torch.float16, seed=3, with_bias=True)
    y = _run(x, w, bias, torch.float32)
    assert y.dtype == torch.float32
    _check(y, ref, torch.float16)


VARIANTS = [(tokens, m, warps, rows, ahead, tr) for tokens, m in ((1, 1), (2, 2), (4, 3), (8, 5), (16, 16))
            for warps, rows, ahead in ((4, 1, 1), (8, 2, 2)) for tr in (0, 1)]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "T{}m{}w{}r{}a{}t{}".format(*v))
@pytest.mark.parametrize("n,k", [(1000, 1008), (64, 16384)])
def test_decode24_config_variants(variant, n, k):
    """Every mode-0 code path over 2:4 meta bytes: one token (byte permutes, or transposed gathers from L1),
    several tokens (staged x, plain or transposed gathers), 1-2 rows a warp, 1-2 chunks in flight, split-K."""
    tokens, m, warps, rows, ahead, tr = variant
    cfg = FAM.Config(max_tokens=tokens, warps=warps, rows=rows, ahead=ahead, transpose=tr)
    x, w, bias, ref = _case(m, n, k, torch.float16, seed=11, with_bias=True)
    _check(_run(x, w, bias, torch.float16, cfg), ref, torch.float16)


@pytest.mark.parametrize("split,push", [(1, 0), (2, 1), (8, 0), (8, 1)])
def test_decode24_cluster_reductions(split, push):
    """Forced cluster sizes, the sums reduced by loads or pushed to their owner, one and several tokens."""
    for tokens, m in ((1, 1), (8, 7)):
        cfg = FAM.Config(max_tokens=tokens, warps=8, rows=2, split=split, push=push)
        x, w, bias, ref = _case(m, 1000, 8192, torch.bfloat16, seed=13, with_bias=True)
        _check(_run(x, w, bias, torch.bfloat16, cfg), ref, torch.bfloat16)


def test_decode24_reads_the_weight_in_place_and_repeats():
    """No copy of the weight: the layout the launcher caches aliases the weight's own values and meta; a second call
    (programmatic dependent launch) gives the same result."""
    x, w, _, ref = _case(1, 4096, 4096, torch.float16, seed=5, with_bias=False)
    before = torch.cuda.memory_allocated()
    first = _run(x, w, None, torch.float16)
    second = _run(x, w, None, torch.float16)
    torch.cuda.synchronize()
    values, meta, stride = next(iter(w._layouts.values()))
    assert (values.data_ptr(), meta.data_ptr(), stride) == (w.values.data_ptr(), w.meta.data_ptr(), 2048)
    assert torch.cuda.memory_allocated() - before <= 2 * first.numel() * first.element_size() + (1 << 20)
    assert torch.equal(first, second)
    _check(second, ref, torch.float16)


def test_decode24_refuses_k_not_a_multiple_of_16():
    x, w, _, _ = _case(2, 256, 1032, torch.float16, seed=1, with_bias=False)
    assert isinstance(w, Sparse24Weight)
    with pytest.raises(cutlass_nm.ShapeError, match="k % 16 == 0"):
        cutlass_nm.matmul(x, w, family=FAM.name)

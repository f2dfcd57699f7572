"""The decode family's launch plan (CPU): split-K within a cluster, x pieces that fit shared memory."""

from __future__ import annotations

import pytest

from cutlass_nm.families.nm_decode import MAX_SPLIT, SMEM_BUDGET, Config, fixed_smem, plan


@pytest.mark.parametrize("n,k,keep,group", [(4096, 4096, 2, 8), (11008, 4096, 16, 32), (1000, 1003, 7, 64),
                                            (64, 16384, 1, 8), (4096, 11008, 3, 7), (520, 1003, 2, 128)])
@pytest.mark.parametrize("cfg", [Config(1, 4, 4), Config(4, 8, 4), Config(16, 16, 4), Config(16, 4, 1)])
def test_plan_pieces_fit_and_cover(n, k, keep, group, cfg):
    nnz = -(-k // group) * keep
    stride = -(-nnz // 8) * 8
    split, piece, smem = plan(cfg, n, stride, keep, group, 132)
    assert 1 <= split <= MAX_SPLIT and smem <= SMEM_BUDGET
    chunks = stride // 8
    red = cfg.warps * cfg.rows * cfg.max_tokens * 4
    for s in range(split):  # every piece's x columns fit the staged buffer, as the kernel computes them
        cb, ce = chunks * s // split, chunks * (s + 1) // split
        for p0 in range(cb, ce, piece):
            p1 = min(p0 + piece, ce)
            cols = ((p1 * 8 - 1) // keep - p0 * 8 // keep + 1) * group
            assert cfg.max_tokens == 1 or red + cols * 2 * cfg.max_tokens <= smem


def test_plan_splits_only_with_clusters():
    assert plan(Config(1, 4, 4), 4096, 1024, 2, 8, 132)[0] > 1
    assert plan(Config(1, 4, 4), 4096, 1024, 2, 8, 132, clusters=False)[0] == 1


@pytest.mark.parametrize("warps,ahead,tokens", [(4, 4, 16), (8, 2, 8), (16, 2, 8), (2, 8, 16)])
def test_bulk_rings_are_counted_and_leave_room_for_x(warps, ahead, tokens):
    """bulk = 1 reserves 2·ahead steps of 1048 bytes per warp (the template's kRingBytes) before x's pieces, and
    every config check() accepts still plans a piece (8192² 2:8 and 4096² 16:32 at vector 32)."""
    from cutlass_nm.families import KernelTypes, Problem, get_family

    fam = get_family("nm_decode")
    bulk = Config(max_tokens=tokens, warps=warps, ahead=ahead, mode=2, bulk=1)
    regs = Config(max_tokens=tokens, warps=warps, ahead=ahead, mode=2)
    assert fixed_smem(bulk) - fixed_smem(regs) == -(-warps * 2 * ahead * 1048 // 16) * 16
    for n, k, keep, group in ((8192, 8192, 2, 8), (4096, 4096, 16, 32)):
        problem = Problem(tokens, n, k, KernelTypes("f16", "f16", False), f"{keep}:{group}", 32)
        if fam.check(bulk, problem) is None:
            _, piece, smem = plan(bulk, n, -(-k // group) * keep, keep, group, 132)
            assert piece >= 1 and smem <= SMEM_BUDGET
    big = Config(max_tokens=16, warps=16, ahead=4, mode=2, bulk=1)
    assert "staged x" in fam.check(big, Problem(16, 4096, 4096, KernelTypes("f16", "f16", False), "2:8", 32))
    assert "mode=2" in fam.check(Config(max_tokens=8, mode=1, bulk=1), Problem(8, 4096, 4096,
                                                                                 KernelTypes("f16", "f16", False)))

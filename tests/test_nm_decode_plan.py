"""The decode families' launch plan (CPU): split-K within a cluster, x pieces that fit shared memory. ``Config``:
nm_decode's (tensor cores), ``Simt``: nm_decode_simt's (CUDA cores, the template's mode 0)."""

from __future__ import annotations

import ctypes

import pytest
from launch_helpers import Recorder, entries_by_name

from cutlass_nm.arch import HOPPER
from cutlass_nm.families.nm_decode.family import MAX_SPLIT, SMEM_BUDGET, Config, fixed_smem, plan
from cutlass_nm.families.nm_decode_simt.family import Config as Simt

SMS = HOPPER.sm_count


@pytest.mark.parametrize("n,k,keep,group", [(4096, 4096, 2, 8), (11008, 4096, 16, 32), (1000, 1003, 7, 64),
                                            (64, 16384, 1, 8), (4096, 11008, 3, 7), (520, 1003, 2, 128)])
@pytest.mark.parametrize("cfg", [Simt(1, 4, 2), Simt(4, 8, 2), Simt(16, 16, 2), Simt(16, 4, 1),
                                 Simt(1, 4, 2, transpose=1), Simt(4, 8, 1, 2, push=1),
                                 Config(8, 8, 2, mode=3, ctas=3, push=1), Config(1, 8, 1, wsplit=8, ctas=-2)])
def test_plan_pieces_fit_and_cover(n, k, keep, group, cfg):
    nnz = -(-k // group) * keep
    stride = -(-nnz // 8) * 8
    split, piece, smem = plan(cfg, n, stride, keep, group, SMS)
    assert 1 <= split <= MAX_SPLIT and smem <= SMEM_BUDGET
    chunks = stride // 8
    red = fixed_smem(cfg)
    for s in range(split):  # every piece's x columns fit the staged buffer, as the kernel computes them
        cb, ce = chunks * s // split, chunks * (s + 1) // split
        for p0 in range(cb, ce, piece):
            p1 = min(p0 + piece, ce)
            cols = ((p1 * 8 - 1) // keep - p0 * 8 // keep + 1) * group
            assert cfg.max_tokens == 1 or red + cols * 2 * cfg.max_tokens <= smem


def test_plan_splits_only_with_clusters():
    assert plan(Simt(1, 4, 2), 2048, 1024, 2, 8, SMS)[0] > 1
    assert plan(Simt(1, 4, 2), 2048, 1024, 2, 8, SMS, clusters=False)[0] == 1


@pytest.mark.parametrize("warps,ahead,tokens", [(4, 1, 16), (8, 2, 8), (16, 2, 8), (16, 2, 16)])
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
            _, piece, smem = plan(bulk, n, -(-k // group) * keep, keep, group, SMS)
            assert piece >= 1 and smem <= SMEM_BUDGET
    big = Config(max_tokens=16, warps=16, ahead=2, mode=2, bulk=1)
    assert "staged x" in fam.check(big, Problem(16, 4096, 4096, KernelTypes("f16", "f16", False), "2:8", 32))
    assert "mode=2" in fam.check(Config(max_tokens=8, mode=3, bulk=1), Problem(8, 4096, 4096,
                                                                                 KernelTypes("f16", "f16", False),
                                                                                 "128:2:8"))


def test_fixed_split_is_used_while_chunks_allow():
    """Config.split fixes the CTAs per cluster (a launch argument), still capped by the chunks a CTA must keep and
    by clusters being available; 0 keeps the rule that fills two CTAs per SM."""
    auto = Config(max_tokens=8, warps=8, ahead=2, mode=2)
    assert plan(auto, 8192, 2048, 2, 8, SMS)[0] == 8  # 32 row blocks x 8 = 256 CTAs
    for split in (1, 2, 4, 8):
        assert plan(Config(max_tokens=8, warps=8, ahead=2, mode=2, split=split), 8192, 2048, 2, 8, SMS)[0] == split
    assert plan(Config(max_tokens=8, warps=8, ahead=2, mode=2, split=8), 8192, 128, 2, 8, SMS)[0] == 2  # 8 steps
    assert plan(Config(max_tokens=8, warps=8, ahead=2, mode=2, split=4), 8192, 2048, 2, 8, SMS, clusters=False)[0] == 1


def test_pdl_is_off_on_the_call_that_builds_the_layout(monkeypatch):
    """Every launch overlaps the previous kernel by programmatic dependent launch, except a weight's first call:
    the kernel before it writes the layout that launch reads before its wait."""
    import types as pytypes

    import torch

    import cutlass_nm
    from cutlass_nm.families import KernelTypes
    from cutlass_nm.families.launch import DeviceInfo
    from cutlass_nm.families.nm_decode import family as nm_decode

    monkeypatch.setattr(nm_decode, "device_info", lambda dev: DeviceInfo(SMS, (9, 0), "fake"))
    monkeypatch.setattr(nm_decode.torch.cuda, "current_stream", lambda dev: pytypes.SimpleNamespace(cuda_stream=0))
    x, y = torch.randn(2, 512, dtype=torch.float16), torch.empty(2, 256, dtype=torch.float16)
    entries_by_name(monkeypatch, nm_decode)
    for cfg in (Config(max_tokens=8, mode=2), Simt(max_tokens=2, warps=8)):
        launched = Recorder(0)

        def cnm_launch(address, *args, launched=launched):  # the packed arguments read during the call, as C does
            return launched(nm_decode.RunArgs.from_buffer_copy(nm_decode.RunArgs.from_address(address)), address,
                            *args)

        lib = pytypes.SimpleNamespace(cnm_launch=cnm_launch, cnm_max_active_clusters=Recorder(1),
                                      cnm_run_args_bytes=lambda: ctypes.sizeof(nm_decode.RunArgs))
        launch = nm_decode.Launcher(lib, cfg, KernelTypes("f16", "f16", False), "nm_decode")
        w = cutlass_nm.prune(torch.randn(256, 512, dtype=torch.float16), "2:8", vector=32)[0]
        launch(x, w, None, y)
        launch(x, w, None, y)
        go = launch.steady(x, w, None, y)
        go(x, w, None, y)
        packed = [call[0] for call in launched.calls]
        assert launched.calls[2][1] == ctypes.addressof(go.keep[0])
        assert [a.pdl for a in packed] == [0, 1, 1]
        assert [(a.m, a.n, a.k, a.keep, a.group) for a in packed] == [(2, 256, 512, 2, 8)] * 3
        assert [call[2:4] for call in launched.calls] == [(x.data_ptr(), y.data_ptr())] * 3
        assert packed[2].values == go.keep[1].data_ptr() and packed[2].indices == go.keep[2].data_ptr()


def test_decode_launcher_refuses_a_kernel_with_another_args_layout(monkeypatch):
    """A kernel whose packed-arguments struct differs from the launcher's mirror is refused at load, not launched
    with misread arguments."""
    import types as pytypes

    from cutlass_nm.errors import LaunchError
    from cutlass_nm.families import KernelTypes
    from cutlass_nm.families.nm_decode import family as nm_decode

    entries_by_name(monkeypatch, nm_decode)
    lib = pytypes.SimpleNamespace(cnm_launch=Recorder(0), cnm_run_args_bytes=lambda: 8)
    with pytest.raises(LaunchError, match="rebuild the kernel cache"):
        nm_decode.Launcher(lib, Config(max_tokens=8, mode=2), KernelTypes("f16", "f16", False), "nm_decode")


def test_ctas_cap_pads_shared_memory():
    """Exactly 2 CTAs per SM (nm_decode's ctas = -2: registers for 2, shared memory capped; nm_decode_simt's
    max_ctas = 2): every launch's shared memory lets two CTAs share an SM and not three (1 KB reserved per CTA),
    staged or not. ctas = c > 0 bounds registers only."""
    from cutlass_nm.families import KernelTypes, Problem, get_family

    for cfg in (Config(max_tokens=8, warps=8, ahead=2, mode=2, ctas=-2), Simt(max_tokens=1, warps=4, max_ctas=2)):
        smem = plan(cfg, 8192, 2048, 2, 8, SMS)[2]
        assert 2 * (smem + 1024) <= HOPPER.smem_per_sm < 3 * (smem + 1024) and smem <= SMEM_BUDGET
    capped, bound = Config(max_tokens=8, warps=8, mode=2, ctas=-2), Config(max_tokens=8, warps=8, mode=2, ctas=2)
    assert (capped.min_ctas, capped.max_ctas, bound.min_ctas, bound.max_ctas) == (2, 2, 2, 0)
    assert plan(bound, 8192, 2048, 2, 8, SMS)[2] < plan(capped, 8192, 2048, 2, 8, SMS)[2]
    problem = Problem(1, 8192, 8192, KernelTypes("f16", "f16", False), "2:8", 32)
    fam = get_family("nm_decode")
    assert fam.check(capped, problem) is None
    assert "64 registers" in fam.check(Config(max_tokens=8, warps=16, mode=2, ctas=3), problem)


@pytest.mark.parametrize("wsplit,tokens", [(4, 8), (4, 16), (8, 1), (8, 4)])
def test_wsplit_rows_sums_and_narrow_x(wsplit, tokens):
    """wsplit = W: a CTA owns 256 / W rows (8 warps) and keeps one fp32 slot per warp and row, so the grid at 8192²
    needs no cluster at W = 8; mode 2 below 8 tokens stages exactly max_tokens tokens of x (2 bytes each), so one
    CTA's whole k-range at one token fits one piece."""
    cfg = Config(max_tokens=tokens, warps=8, ahead=2, mode=2, split=8 // wsplit, wsplit=wsplit)
    assert cfg.block_rows == 256 // wsplit
    assert fixed_smem(cfg) == 256 * tokens * 4
    split, piece, smem = plan(cfg, 8192, 2048, 2, 8, SMS)  # 2:8 at k = 8192
    assert split == 8 // wsplit and (8192 // cfg.block_rows) * split == 256
    if tokens == 1:  # 8192 columns (+ one group, + 16 of slack) x 2 bytes: one piece for the whole row
        assert piece == 2048 // 16 and smem == fixed_smem(cfg) + (8192 + 8 + 16) * 2
    assert smem <= SMEM_BUDGET


def test_wsplit_check_refuses_what_the_template_cannot_build():
    from cutlass_nm.families import KernelTypes, Problem, get_family

    fam = get_family("nm_decode")
    problem = Problem(1, 4096, 4096, KernelTypes("f16", "f16", False), "2:8", 32)
    assert fam.check(Config(max_tokens=8, warps=8, ahead=2, mode=2, wsplit=8), problem) is None
    for bad in (Config(max_tokens=8, warps=8, ahead=2, mode=2, bulk=1, wsplit=4),  # rings are per warp's steps
                Config(max_tokens=8, warps=4, ahead=2, mode=2, wsplit=8)):  # fewer warps than W
        assert "wsplit" in fam.check(bad, problem)
    assert "wsplit" not in Simt.SPACE and Simt(max_tokens=1, warps=8).wsplit == 1  # CUDA cores: a warp per rows

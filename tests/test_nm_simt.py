"""nm_simt on the CPU: config space and validity, records, the kernel layout, fp32 routing and refusals."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

import cutlass_nm
from cutlass_nm import ConfigError, InputError
from cutlass_nm.families import FAMILIES, KernelTypes, Problem
from cutlass_nm.families.nm_simt.family import (
    FAMILY,
    MAX_GROUP,
    Config,
    ctas_per_sm,
    kgroups_for,
    producer_threads,
    simt_layout,
    smem_bound,
    tail_split_for,
    tail_waves,
    template_constants,
)
from cutlass_nm.formats.nm import NMWeight, compress_nm
from cutlass_nm.routing import default_family
from cutlass_nm.tune.space import all_configs

F32 = KernelTypes("f32", "f32", False)
LLAMA = [(m, n, k) for m in (256, 512, 1024, 2048, 4096) for n, k in ((4096, 4096), (12288, 4096), (11008, 4096),
                                                                      (4096, 11008))]


def test_registered_and_space_is_discrete_ints():
    assert FAMILIES["nm_simt"] is FAMILY and FAMILY.weight is NMWeight
    for values in Config.SPACE.values():
        assert values and all(type(v) is int for v in values)


def test_space_is_curated(monkeypatch):
    """At most 100,000 points; on sm_90 only transposed, TMA-filled variants (the others lost there everywhere),
    elsewhere (cp.async) both; every default value is in the space."""
    assert math.prod(len(v) for v in Config.SPACE.values()) <= 100_000
    assert FAMILY.space()["tma"] == (1,) and FAMILY.space()["x_transposed"] == (1,)
    monkeypatch.setenv("CUTLASS_NM_PLAN_ARCH", "sm_80")
    assert FAMILY.space() == Config.SPACE
    assert Config.from_record(Config().to_record()) == Config()
    for gone in ({"fuse_x": 0}, {"compact": 0}, {"block_rows": 64}, {"thread_rows": 4}, {"k_cols": 16},
                 {"split_k": 8}):
        with pytest.raises(ConfigError):
            Config.from_record(gone)


@pytest.mark.parametrize("types", [F32, KernelTypes("f16", "f16", True), KernelTypes("bf16", "f32", False)])
def test_heuristic_is_valid_and_in_the_space(types):
    space = FAMILY.space()
    for m, n, k in [*LLAMA, (17, 1000, 1003), (1, 64, 7)]:
        for pattern, vector in (("2:4", 0), ("16:32", 1), ("4:32", 32), ("31:64", 8), ("3:7", 128)):
            p = Problem(m, n, k, types, pattern, vector)
            cfg = FAMILY.heuristic(p)
            assert FAMILY.check(cfg, p) is None
            assert all(getattr(cfg, name) in values for name, values in space.items()), cfg


def test_check_rejects_impossible_configs():
    p = Problem(256, 4096, 4096, F32)
    assert "warps" in FAMILY.check(Config(block_tokens=64, thread_tokens=16), p)
    assert "threads" in FAMILY.check(Config(block_rows=256, block_tokens=256), p)
    big = Config(block_rows=128, block_tokens=256, thread_tokens=16, k_cols=128, stages=5)
    assert "register" in FAMILY.check(Config(block_rows=256, block_tokens=256, thread_tokens=16), p)
    assert smem_bound(big) > 227 * 1024 and "shared memory" in FAMILY.check(big, p)
    # the bound follows the pattern's k-tile: long k-tiles fit at high sparsity, not at 2:4
    long_k = Config(block_rows=256, block_tokens=64, k_cols=128, x_transposed=1)
    assert FAMILY.check(long_k, Problem(256, 4096, 4096, F32, "1:8")) is None
    assert "shared memory" in FAMILY.check(long_k, Problem(256, 4096, 4096, F32, "2:4"))
    assert smem_bound(long_k, "1:8") < smem_bound(long_k, "2:4") <= smem_bound(long_k)
    assert "output" in FAMILY.check(Config(), Problem(256, 64, 64, KernelTypes("f32", "f16", False)))
    valid = all_configs(FAMILY, p)  # sm_90's space: transposed, TMA-filled
    assert replace(Config(), x_transposed=1, tma=1) in valid and 100 < len(valid) < 100_000


def test_k_warps_doubles_threads_and_keeps_the_tile_in_shared_memory():
    """k_warps = 2: twice the warps for the same CTA tile, and room for the tile of sums after the k loop."""
    one = Config(block_rows=128, block_tokens=128, thread_tokens=16, k_cols=32, stages=2, x_transposed=1, tma=1)
    two = replace(one, k_warps=2)
    assert two.threads == 2 * one.threads == 256
    assert smem_bound(one, "4:32") < 128 * 128 * 4 <= smem_bound(two, "4:32")
    assert Config.from_record({k: v for k, v in two.to_record().items() if k != "k_warps"}).k_warps == 1
    p = Problem(256, 4096, 4096, F32, "4:32")
    assert FAMILY.check(two, p) is None
    assert "threads" in FAMILY.check(replace(two, block_rows=256, block_tokens=256), p)


def test_from_record_is_strict():
    cfg = Config(block_rows=256, split_k=4)
    assert Config.from_record(cfg.to_record()) == cfg
    for bad in ({"block_rows": 48}, {"stages": "3"}, {"split_k": True}, {"tile": 1}, {"fuse_x": 1}):
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


def test_tma_smem_and_rule():
    """tma = 1: the xᵀ tile is unpadded (TMA boxes) and each stage has an 8-byte mbarrier; it needs whole xᵀ tiles."""
    tma = replace(WIDE3, tma=1)
    # 16:32, vector 32: x^T 64 x 64 floats = 16384 B, W 32768, indices 8 x 32 x 4 = 1024: 50176 per stage (x 128)
    assert smem_bound(tma, "16:32", 32) == 3 * (16384 + 32768 + 1024 + 16)
    assert smem_bound(tma, "16:32", 32) < smem_bound(WIDE3, "16:32", 32)
    assert FAMILY.check(tma, Problem(2048, 4096, 4096, F32, "4:32", 32)) is None
    assert "x_transposed" in FAMILY.check(replace(tma, x_transposed=0), Problem(2048, 4096, 4096, F32, "4:32", 32))


@pytest.mark.parametrize("reduce", [1, 2, 3])
def test_split_reduce_rules(reduce):
    """split_reduce = 1 adds the splits into an fp32 output, 2 sums them in a thread block cluster into any output
    type, 3 adds the last partial wave's splits (fp32 output); all need split-K."""
    p = Problem(256, 4096, 4096, F32, "8:32", 32)
    cfg = Config(block_rows=128, block_tokens=256, thread_tokens=16, k_cols=64, split_k=4, x_transposed=1, tma=1,
                 split_reduce=reduce)
    assert FAMILY.check(cfg, p) is None
    assert FAMILY.check(cfg, replace(p, types=KernelTypes("f16", "f32", False))) is None
    assert "split_k > 1" in FAMILY.check(replace(cfg, split_k=1), p)
    half = FAMILY.check(cfg, replace(p, types=KernelTypes("f16", "f16", False)))
    assert half is None if reduce == 2 else "f32" in half
    assert f"constexpr bool kClusterSplit = kSplit > 1 && {reduce} == 2;" in FAMILY.source(cfg, F32)


def test_cluster_split_shared_memory():
    """split_reduce = 2: the CTA's tile of sums reuses the stages' shared memory after the k loop, so the bound is the
    larger of the two."""
    cluster = Config(block_rows=128, block_tokens=256, thread_tokens=16, k_cols=64, split_k=4, x_transposed=1, tma=1,
                     split_reduce=2)
    # 128 x 256 floats of sums = 131072 B; 8:32's three stages at k_cols 64 are larger (x 65536 + W 8192 + cols)
    stages = smem_bound(replace(cluster, split_reduce=0), "8:32", 32)
    assert smem_bound(cluster, "8:32", 32) == stages
    # two stages of 32-column k-tiles at 1:8 are smaller than the tile: the tile sets the bound
    small = replace(cluster, k_cols=32, stages=2)
    assert smem_bound(replace(small, split_reduce=0), "1:8", 32) < 131072 + 32
    assert smem_bound(small, "1:8", 32) == 131072 + 2 * 16


# 256x64 CTAs of 8x8 tiles, 64-column k-tiles, 3 stages, x transposed: at vector 1 an H200's launcher refused it
# for 16:32, 2:4, 31:64 and 1:2 (status 3) and ran it for 1:4, 2:8, 3:7, 5:16 and every pattern at vectors 8-64
WIDE3 = Config(block_rows=256, block_tokens=64, k_cols=64, stages=3, x_transposed=1)


def test_smem_bound_is_the_launchers_arithmetic():
    """cnm_run: stage = ceil128(x + ktc * block_rows * 4 + nvb * ktc * 4), nvb = block_rows / vector (>= 1)."""
    # 16:32 in 64 columns: kgroups 2, ktd 64, ktc 32; W 32 x 256 x 4 = 32768 B
    # vector >= thread_rows with x_transposed: x^T tile 64 x (64 + 4) floats = 17408 B (mode 2)
    assert smem_bound(WIDE3, "16:32", 32) == 3 * (17408 + 32768 + 8 * 32 * 4)  # 153600
    assert smem_bound(WIDE3, "16:32", 8) == 3 * (17408 + 32768 + 32 * 32 * 4)  # 162816
    # vector 1 < thread_rows: token-major x, 64 x (64 + 4) floats; 256 index rows
    assert smem_bound(WIDE3, "16:32", 1) == 3 * (17408 + 32768 + 256 * 32 * 4) == 248832
    # Config(): 128x128, k_cols 32; 3:7 -> kgroups 4, ktd 28, ktc 12; x token-major 128 x 36 floats; W 6144 B
    assert smem_bound(Config(), "3:7", 32) == 3 * 24832  # 18432 + 6144 + 4 rows x 12 x 4 = 24768 -> 24832
    assert smem_bound(Config(), "3:7", 64) == 3 * 24704  # 2 index rows: 24672 -> 24704
    assert smem_bound(Config(), "3:7", 1) == 3 * (18432 + 6144 + 128 * 12 * 4)  # 30720, a multiple of 128
    # vector >= block_rows: one index row. 2:4 in 32 columns: ktd 32, ktc 16; x 128 x 36 floats, W 8192 B
    assert smem_bound(Config(), "2:4", 128) == 3 * 26752  # 18432 + 8192 + 64 = 26688 -> 26752
    assert smem_bound(Config(), "2:4", 64) == 3 * 26752  # + 64 B of a second index row: the same 128 B


@pytest.mark.parametrize("cfg", [WIDE3, Config(), Config(x_transposed=1, split_k=2),
                                 Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=64, stages=2,
                                        x_transposed=1)], ids=str)
@pytest.mark.parametrize("pattern", ["2:4", "1:8", "3:7", "5:16", "16:32", "31:64"])
def test_smem_bound_grows_as_the_vector_shrinks(cfg, pattern):
    sizes = [smem_bound(cfg, pattern, v) for v in (64, 32, 16, 8, 1)]
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]
    assert smem_bound(cfg, pattern) == smem_bound(cfg, pattern, 0) == max(sizes)  # unknown: the worst case


@pytest.mark.parametrize("pattern", ["1:4", "2:8", "3:7", "5:16", "16:32", "2:4", "31:64", "1:2"])
def test_check_matches_the_h200_launches(pattern):
    refused = {"16:32", "2:4", "31:64", "1:2"}  # at vector 1, by the launcher on the H200
    for vector in (1, 8, 32, 64):
        reason = FAMILY.check(WIDE3, Problem(256, 1000, 1003, F32, pattern, vector))
        if vector == 1 and pattern in refused:
            assert "shared memory" in reason and "vector 1" in reason
        else:
            assert reason is None, reason
    # vector unknown: never under-counted
    assert (FAMILY.check(WIDE3, Problem(256, 1000, 1003, F32, pattern)) is None) == (pattern not in refused)


def test_check_accepts_vector_32_and_refuses_vector_1():
    p32, p1 = Problem(256, 4096, 4096, F32, "16:32", 32), Problem(256, 4096, 4096, F32, "16:32", 1)
    assert FAMILY.check(WIDE3, p32) is None
    reason = FAMILY.check(WIDE3, p1)
    assert reason == f"3 stages need 248832 B of shared memory (> {227 * 1024}) for 16:32, vector 1"
    assert FAMILY.check(WIDE3, Problem(256, 4096, 4096, F32, "16:32")).endswith("the worst vector (unknown)")
    assert Problem(1, 2, 3, F32).vector == 0  # other weight types: not applicable


@pytest.mark.parametrize("types", [F32, KernelTypes("bf16", "f32", True)])
@pytest.mark.parametrize("pattern", ["2:4", "1:8", "3:7", "5:16", "16:32", "31:32", "63:64"])
@pytest.mark.parametrize("vector", [0, 1, 8, 32])
@pytest.mark.parametrize("m", [1, 256, 4096])
def test_heuristic_fits_every_vector(types, pattern, vector, m):
    for n, k in ((4096, 4096), (11008, 4096), (4096, 11008), (1000, 1003)):
        p = Problem(m, n, k, types, pattern, vector)
        cfg = FAMILY.heuristic(p)
        assert FAMILY.check(cfg, p) is None
        assert cfg.x_transposed == 1 and cfg.tma == 1
        fits = vector in (8, 32) and pattern not in ("31:32", "63:64")  # the first choice fits
        kw_shapes = ((4096, 4096), (4096, 11008), (11008, 4096))
        if cfg.k_warps == 2:  # 256 tokens: split in two where that fills >= 95 % of the waves, else the last wave
            assert m == 256 and (n, k) in kw_shapes
            assert (cfg.block_rows, cfg.block_tokens, cfg.k_cols) == (128, 128, 128)
            assert (cfg.split_k, cfg.split_reduce) == ((3, 3) if n == 11008 else (2, 2))
            assert cfg.stages == (3 if pattern == "1:8" and vector in (8, 32) else 2)  # 3 fit at densities <= 1/8
            continue
        assert not (fits and m == 256 and (n, k) in kw_shapes)  # there k_warps fits and is chosen
        sparse = pattern in ("1:8", "5:16")  # density < 3/8
        tile = (cfg.block_tokens, cfg.thread_rows, cfg.thread_tokens)
        assert tile == ((64, 8, 8) if m < 256 else (256, 8, 16) if sparse else (128, 16, 8))
        # two splits are summed in a cluster from 256 tokens; other splits by the partials pass
        assert cfg.split_reduce == (2 if cfg.split_k == 2 and m >= 256 else 0)
        # 8 x 16 tiles chain their k-tiles from density 1/4 (5:16, not 1:8)
        assert cfg.chain == int(pattern == "5:16" and m >= 256)
        if fits:
            assert cfg.block_rows == (128 if sparse and m >= 256 else 256)
            # 96-column k-tiles at densities <= 1/8 from 1024 tokens; 3 stages from 256 tokens, else 2
            long = pattern == "1:8" and m >= 1024
            assert (cfg.k_cols, cfg.stages) == ((96, 2) if long else (64, 3) if m >= 256 else (64, 2))


def test_heuristic_rows_follow_the_vector():
    p = [Problem(512, 4096, 11008, F32, "16:32", v) for v in (32, 1, 0)]
    assert [FAMILY.heuristic(q).stages for q in p] == [3, 2, 2]  # vector 1 and unknown: 3 stages do not fit
    # 128 x 128 CTAs of two warp groups, split in two (128 CTAs), where it fits (vector 32, not 1); else 32 CTAs of
    # 256 x 128 with k split 4 ways
    for k in (4096, 11008):
        kw = FAMILY.heuristic(Problem(256, 4096, k, F32, "16:32", 32))
        assert (kw.k_warps, kw.split_k, kw.split_reduce) == (2, 2, 2)
    assert FAMILY.heuristic(Problem(256, 4096, 4096, F32, "16:32", 1)).k_warps == 1
    assert FAMILY.heuristic(Problem(256, 4096, 11008, F32, "16:32", 1)) == Config(
        block_rows=256, block_tokens=128, thread_rows=16, k_cols=64, stages=2, split_k=4, x_transposed=1, tma=1)
    # vector 1 at 63:64: 2 stages of 256 rows do not fit (292864 B): the CTA's rows are halved
    wide = FAMILY.heuristic(Problem(256, 4096, 4096, F32, "63:64", 1))
    assert (wide.block_rows, wide.stages) == (128, 2)
    # below 256 tokens: 256 x 64 CTAs; 16 x 1 of them at m = 64, so k split 4 ways
    assert FAMILY.heuristic(Problem(64, 4096, 4096, F32, "2:8", 32)) == Config(
        block_rows=256, block_tokens=64, k_cols=64, stages=2, split_k=4, x_transposed=1, tma=1)
    assert smem_bound(Config(**{**wide.to_record(), "block_rows": 256}), "63:64", 1) > 227 * 1024
    # 512 tokens: 64 CTAs split 2 ways, the two splits summed in a cluster (the sparse and the dense tiles)
    sparse = FAMILY.heuristic(Problem(512, 4096, 4096, F32, "4:32", 32))
    dense = FAMILY.heuristic(Problem(512, 4096, 4096, F32, "16:32", 32))
    assert (sparse.split_k, sparse.split_reduce) == (2, 2) and (dense.split_k, dense.split_reduce) == (2, 2)


def _nm_key(vector, m=256, n=4096, k=4096, pattern="16:32"):
    from cutlass_nm.patterns import Pattern

    return (m, n, k, torch.float32, torch.float32, False, torch.device("cpu"), "nm_simt", NMWeight,
            Pattern.parse(pattern), vector)


def test_dispatch_refuses_a_selected_config_that_does_not_fit(monkeypatch, caplog):
    """A DB winner tuned on vector-32 weights, offered for a vector-1 weight of the same shape (the DB key has no
    vector), is never launched: dispatch runs the heuristic, and says so once."""
    from cutlass_nm import dispatch

    built, seen = [], []
    monkeypatch.setattr(dispatch, "get_kernel", lambda kid: built.append(kid) or object())
    monkeypatch.setattr(dispatch, "_REFUSED_WARNED", set())

    def selector(family, problem):
        seen.append(problem)
        return WIDE3

    cutlass_nm.set_selector(selector)
    try:
        with caplog.at_level("DEBUG", logger="cutlass_nm.dispatch"):
            dispatch._resolve(_nm_key(32))
            dispatch._resolve(_nm_key(1))
            dispatch._resolve(_nm_key(1, n=11008))
    finally:
        cutlass_nm.set_selector(None)
    assert [p.vector for p in seen] == [32, 1, 1]  # the selector and check() see the weight's vector
    assert built[0] == ("nm_simt", WIDE3, F32)  # it fits vector 32: used
    for kid, p in zip(built[1:], seen[1:], strict=True):
        assert kid[1] != WIDE3 and kid[1] == FAMILY.heuristic(p) and FAMILY.check(kid[1], p) is None
    warned = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "using the heuristic" in warned[0].getMessage()
    assert "vector 1" in warned[0].getMessage()
    assert len([r for r in caplog.records if r.levelname == "DEBUG" and "heuristic" in r.getMessage()]) == 1


def test_tuner_problem_carries_the_measured_vector(tmp_path):
    from tune_helpers import env, no_build

    from cutlass_nm.bench.run import NM_VECTOR
    from cutlass_nm.tune import tune_problem

    checked = []

    def measure(cfg, reps=50):
        checked.append(cfg)
        return {"status": "ok", "p20_ms": 1.0, "p50_ms": 1.0, "p80_ms": 1.0, "iterations": reps}

    res = tune_problem(Problem(256, 4096, 4096, F32, "16:32"), family="nm_simt", n_trials=10, storage=None,
                       db_url=f"sqlite:///{tmp_path / 't.sqlite'}", env=env(), measure=measure, build=no_build,
                       jobs=1, warm_start=3, retime_top=1, seed=0)  # warm start: some valid trials, whatever the seed
    assert res.problem.vector == NM_VECTOR == 32
    assert checked and all(FAMILY.check(c, res.problem) is None for c in checked)


@pytest.mark.parametrize("name", ["sptc24_sm90", "sptc24_sm80", "vnm_sm90", "nm_decode", "nm_decode_simt"])
def test_half_families_reject_fp32_in_check(name):
    fam = FAMILIES[name]
    assert "fp16/bf16" in fam.check(fam.Config(), Problem(256, 4096, 4096, F32))


def test_dispatch_refuses_fp32_for_every_family_but_simt():
    from cutlass_nm.dispatch import _resolve

    for name, fam in FAMILIES.items():
        if "f32" in getattr(fam, "input_dtypes", ()):
            continue
        key = (32, 256, 512, torch.float32, torch.float32, False, torch.device("cpu"), name, fam.weight, "2:4", 0)
        with pytest.raises(InputError, match=r"inputs, got torch\.float32"):
            _resolve(key)


def test_fp32_routing_and_refusals():
    assert default_family(torch.device("cpu"), NMWeight, 3, torch.float32) == "nm_simt"
    assert default_family(torch.device("cpu"), NMWeight, 3, torch.float16, vector=32) == "nm_decode"
    assert default_family(torch.device("cpu"), NMWeight, 3, torch.float16, vector=1) == "nm_decode_simt"
    assert default_family(torch.device("cpu"), NMWeight, 17, torch.float16) == "nm_simt"
    w24 = cutlass_nm.compress(torch.randn(256, 512, dtype=torch.float16), "2:4", prune=True)  # fp32 2:4: refused
    with pytest.raises(InputError, match="float16 or bfloat16"):
        cutlass_nm.matmul(torch.randn(4, 512), w24)
    with pytest.raises(InputError, match="float64"):
        cutlass_nm.matmul(torch.randn(4, 512, dtype=torch.float64), w24)


def test_check_refuses_groups_the_launcher_refuses():
    """M > 64 is refused by check() with the rule, before any compile or launch (the launcher would return 2)."""
    p = Problem(256, 4096, 4096, F32, "2:128", 32)
    cfg = FAMILY.heuristic(p)
    reason = FAMILY.check(cfg, p)
    assert reason is not None and "M <= 64" in reason and "2:128" in reason
    assert FAMILY.check(cfg, Problem(256, 4096, 4096, F32, "2:64", 32)) is None


def test_tail_split_estimate_counts_waves():
    """split_reduce = 3 splits only the last partial wave: at 2048 x 11008 (688 tiles of 128 x 256, 5.2 waves on 132
    SMs) four tail splits run 5 + 1/4 waves, split_reduce = 1 at split 4 nearly the same waves with 4x the tiles' sums,
    no split 6 waves; where the tiles fill whole waves (n = 4224: 33 x 8 = 264 tiles) split_reduce = 3 changes
    nothing."""
    p = Problem(2048, 11008, 4096, F32, "8:32", 32)
    whole = Config(block_rows=128, block_tokens=256, thread_tokens=16, k_cols=64, x_transposed=1, tma=1)
    tail = replace(whole, split_k=4, split_reduce=3)
    assert FAMILY.check(tail, p) is None
    assert tail.estimate_ms(p) < whole.estimate_ms(p) * 5.3 / 6
    assert tail.estimate_ms(p) < replace(tail, split_reduce=1).estimate_ms(p)
    even = replace(p, n=4224)
    assert tail.estimate_ms(even) == pytest.approx(whole.estimate_ms(even))


def test_heuristic_splits_the_last_wave_where_it_saves_waves():
    """split_reduce = 3 where the tiles leave a partial last wave and splitting it saves >= 5 % of the waves (fp32
    output only): n = 11008 from 256 to 2048 tokens; not at 4096 tokens (10.5 of 11 waves) or n = 4096."""
    for m, split in ((512, 3), (1024, 3), (2048, 4)):
        for pattern in ("16:32", "8:32", "4:32"):
            cfg = FAMILY.heuristic(Problem(m, 11008, 4096, F32, pattern, 32))
            assert (cfg.split_k, cfg.split_reduce) == (split, 3)
            assert tail_split_for(cfg, Problem(m, 11008, 4096, F32, pattern, 32)) == split
    assert tail_waves(688, 132, 4) == 5.25 and tail_waves(100, 132, 3) == 1.0
    half = FAMILY.heuristic(Problem(2048, 11008, 4096, KernelTypes("f16", "f16", False), "8:32", 32))
    assert half.split_reduce != 3  # atomics add into fp32 only
    assert FAMILY.heuristic(Problem(2048, 11008, 4096, KernelTypes("bf16", "f32", False), "8:32", 32)).split_reduce == 3
    for m, n in ((4096, 11008), (2048, 4096), (4096, 12288)):
        assert FAMILY.heuristic(Problem(m, n, 4096, F32, "8:32", 32)).split_reduce != 3
    # 256 tokens, n = 11008: the k_warps tile (172 of them: 1.3 waves of 132) with its last wave split 3 ways
    kw = FAMILY.heuristic(Problem(256, 11008, 4096, F32, "8:32", 32))
    assert (kw.k_warps, kw.split_k, kw.split_reduce) == (2, 3, 3)


def test_chain_rule_and_heuristic():
    """chain = 1 is a distinct kernel only for 8 x 16 thread tiles in the TMA loop of one k group (16-row tiles always
    chain); the heuristic takes it for its 8 x 16 tiles from density 1/4."""
    p = Problem(2048, 4096, 4096, F32, "8:32", 32)
    tile = Config(block_rows=128, block_tokens=256, thread_tokens=16, k_cols=64, x_transposed=1, tma=1, chain=1)
    assert FAMILY.check(tile, p) is None
    assert "kTR * kTT == 128" in FAMILY.source(tile, F32) and "&& (kTR >= 16 || (1 &&" in FAMILY.source(tile, F32)
    for other in (replace(tile, tma=0), replace(tile, k_warps=2, block_tokens=128),
                  replace(tile, block_rows=256, block_tokens=128, thread_rows=16, thread_tokens=8)):
        assert "chain=1 applies to 8 x 16" in FAMILY.check(other, p)
    assert FAMILY.heuristic(p).chain == 1
    assert FAMILY.heuristic(replace(p, pattern="4:32")).chain == 0
    assert FAMILY.heuristic(replace(p, pattern="16:32")).chain == 0  # 16 x 8 tiles: chained without the flag


@pytest.mark.nvcc
def test_source_compiles(isolated_cache):
    from cutlass_nm.kernels import precompile

    own = Config(block_tokens=256, thread_tokens=16, k_cols=64, x_transposed=1, tma=1, chain=1)  # producer warpgroup
    kids = [(FAMILY.name, Config(split_k=2), KernelTypes("bf16", "f32", True)),
            (FAMILY.name, own, KernelTypes("f32", "f32", True)),
            (FAMILY.name, replace(own, block_rows=256, block_tokens=64, thread_tokens=8, chain=0, split_k=2,
                                  split_reduce=2), KernelTypes("f16", "f16", False))]
    assert not [r for r in precompile(kids, workers=2) if isinstance(r, Exception)]


@pytest.mark.parametrize("cfg", [Config(), Config(block_tokens=256, thread_tokens=16, x_transposed=1, tma=1),
                                 Config(block_rows=256, block_tokens=64, x_transposed=1, tma=1, split_k=2,
                                        split_reduce=2),
                                 Config(block_tokens=128, thread_tokens=16, k_cols=128, x_transposed=1, tma=1,
                                        k_warps=2)], ids=str)
def test_template_takes_the_derived_constants(cfg):
    """The numbers smem_bound and the heuristic derive per config are substituted into the template (which re-derives
    each by static_assert): the launch bounds, the producer warpgroup, pitches, the tile of sums, barrier bytes."""
    c = template_constants(cfg)
    src = FAMILY.source(cfg, F32)
    assert f"constexpr int kMinBlocks = {ctas_per_sm(cfg)};" in src
    assert f"constexpr int kProducerThreads = {producer_threads(cfg)};" in src
    assert f"constexpr int kMaxGroup = {MAX_GROUP};" in src
    for name in ("pitch_fast", "pitch_t", "sum_tile_bytes", "barrier_bytes"):
        assert f"= {c[name]};" in src
    assert "${" not in src
    # 8 x 8 tiles of <= 256 threads: two CTAs per SM, no producer warpgroup; 8 x 16 with tma: one, with it
    assert ctas_per_sm(Config()) == 2 and producer_threads(cfg) == (128 if cfg.thread_tokens == 16 else 0)

"""vnm_sm90 without a GPU: config space and validity, emitted source, hostile records, the kernel layout."""

from __future__ import annotations

import ctypes
import itertools

import pytest
import torch

import cutlass_nm
from cutlass_nm import ConfigError
from cutlass_nm.families import FAMILIES, KernelTypes, Problem, get_family, launch
from cutlass_nm.families.vnm_sm90.family import Config, fallback_config, gathered_k, kernel_layout, smem_bytes
from cutlass_nm.formats import Sparse24Weight, meta_sm90
from cutlass_nm.formats.vnm import compress_vnm

FAM = get_family("vnm_sm90")
F16 = KernelTypes("f16", "f16", False)


def test_registered_for_vnm_weights():
    assert FAMILIES["vnm_sm90"] is FAM
    assert FAM.weight is cutlass_nm.formats.vnm.VNMWeight and FAM.arch == "sm_90a"


def test_space_validity():
    p = Problem(2048, 4096, 4096, F16)
    points = [Config(**dict(zip(Config.SPACE, v, strict=True))) for v in itertools.product(*Config.SPACE.values())]
    verdicts = {c: FAM.check(c, p) for c in points}
    assert all(isinstance(r, str) for c, r in verdicts.items() if c.consumers == 2 and c.tile_m == 64)
    assert "accumulators" in FAM.check(Config(tile_m=128, tile_n=256, consumers=1), p)
    assert "shared memory" in FAM.check(Config(tile_m=128, tile_n=256, tile_k=128, stages=8, consumers=2), p)
    assert FAM.check(Config(tile_m=128, tile_n=256, tile_k=64, stages=4, consumers=2), p) is None
    for m in (1, 64, 4096):
        q = Problem(m, 4096, 4096, F16)
        assert FAM.check(FAM.heuristic(q), q) is None


@pytest.mark.parametrize("types", [F16, KernelTypes("bf16", "f32", True)])
def test_source_interpolates_only_validated_values(types):
    cfg = Config(tile_m=128, tile_n=256, tile_k=64, stages=4, consumers=2)
    src = FAM.source(cfg, types)
    assert "${" not in src
    assert "constexpr int kTileM = 128;" in src and "constexpr int kTileN = 256;" in src
    assert "constexpr int kStages = 4;" in src and "constexpr int kConsumers = 2;" in src
    assert ("constexpr bool kHasBias = true;" in src) == types.bias
    assert f"sizeof(SharedStorage) == {smem_bytes(cfg)}" in src  # the template checks the family's sizes
    assert "using ElementOut = float;" in src if types.out_dtype == "f32" else "cutlass::half_t;" in src


@pytest.mark.parametrize("record", [
    {"tile_m": "64); system(\"x\"); (", "tile_n": 128},
    {"tile_m": 96},
    {"tile_m": True},
    {"tile_n": 128.0},
    {"stages": 9},
    {"consumers": "2"},
    {"tile_k": 64, "evil": 1},
    {},
    [("tile_m", 64)],
])
def test_from_record_rejects_hostile_records(record):
    with pytest.raises(ConfigError):
        Config.from_record(record)


def test_from_record_roundtrip():
    cfg = Config(tile_m=128, tile_n=64, tile_k=128, stages=3, consumers=2)
    assert Config.from_record(cfg.to_record()) == cfg


@pytest.mark.parametrize("key", ["transpose", "gather", "producer"])
def test_records_with_removed_variants_are_rejected(key):
    """The padded transpose, the TMA gather and the unbatched producer were removed: no record selects them."""
    with pytest.raises(ConfigError):
        Config.from_record({"tile_m": 128, "tile_n": 256, "tile_k": 64, "stages": 5, "consumers": 2, key: 1})


def test_shared_memory_plan():
    """smem_bytes: the stages, 16 bytes of barriers per stage and two k-tiles of indices, 1024-byte aligned; the
    space check uses it (H100: 232448 bytes)."""
    cfg = Config(tile_m=128, tile_n=256, tile_k=64, stages=5, consumers=2)
    assert smem_bytes(cfg) == -(-(5 * (128 * 64 + 128 * 64 // 8 + 256 * 64 * 2 + 16) + 512) // 1024) * 1024
    p = Problem(2048, 4096, 4096, F16)
    for c in (Config(**dict(zip(Config.SPACE, v, strict=True))) for v in itertools.product(*Config.SPACE.values())):
        verdict = FAM.check(c, p)
        if smem_bytes(c) > 232448:
            assert verdict is not None
        elif verdict is not None:
            assert "shared memory" not in verdict


def test_v64_twin_of_every_heuristic_config():
    """A tile_m = 128 heuristic config names its tile_m = 64 twin as a helper kernel (same tile_n, tile_k, stages,
    raster; one consumer, CUTLASS's mainloop, no cluster); the twin is valid and needs no helper."""
    for m in (128, 256, 2048, 8192):
        p = Problem(m, 4096, 4096, F16)
        cfg = FAM.heuristic(p)
        (kid,) = FAM.helpers(cfg, F16)
        twin = kid[1]
        assert kid == ("vnm_sm90", fallback_config(cfg), F16)
        assert (twin.tile_m, twin.consumers, twin.mma_pipe, twin.cluster) == (64, 1, 0, 1)
        assert (twin.tile_n, twin.tile_k, twin.stages, twin.raster) == (cfg.tile_n, cfg.tile_k, cfg.stages, cfg.raster)
        assert FAM.check(twin, p) is None and FAM.helpers(twin, F16) == []
    assert FAM.helpers(FAM.heuristic(Problem(16, 4096, 4096, F16)), F16) == []


@pytest.mark.parametrize("pattern,shape", [("64:2:8", (130, 200)), ("128:2:7", (256, 101)), ("64:2:16", (64, 64))])
def test_kernel_layout_computes_the_product(pattern, shape):
    """The padded gathered weight, applied to x gathered by the padded index per V-block, equals x·Wᵀ."""
    n, k = shape
    g = torch.Generator().manual_seed(0)
    w, _ = cutlass_nm.prune(torch.randn(n, k, generator=g).half(), pattern)
    x = torch.randn(5, k, generator=g, dtype=torch.float64)
    values, e, gidx = kernel_layout(w, 64)
    kg = gathered_k(w)
    assert kg % 128 == 0 and values.shape == (n, kg // 2) and gidx.shape == (-(-n // w.pattern.v), kg)
    assert e.numel() == meta_sm90.padded_shape(n, kg, 64)[0] * kg // 8
    meta = meta_sm90.from_sm90(e, n, kg, 64)
    dense = Sparse24Weight.from_groups(values, meta, (n, kg)).to_dense().double()
    xp = torch.cat((torch.nn.functional.pad(x, (0, w.padded_k - k)), torch.zeros(5, 1, dtype=x.dtype)), 1)
    idx = torch.where(gidx < 0, w.padded_k, gidx).long()  # -1: the kernel zero-fills
    v = w.pattern.v
    y = torch.cat([xp[:, idx[r // v]] @ dense[r:r + v].T for r in range(0, n, v)], 1)
    torch.testing.assert_close(y, x @ w.to_dense().double().T)


class _FakeFn:
    argtypes = restype = None

    def __init__(self, result: int = 64) -> None:
        self.result, self.calls = result, []

    def __call__(self, *args):
        self.calls.append(args)
        return self.result


def _fake_lib():
    return type("Lib", (), {"cnm_meta_atom_k": _FakeFn(), "cnm_transpose": _FakeFn(), "cnm_plan_bytes": _FakeFn(),
                            "cnm_plan": _FakeFn(0), "cnm_launch": _FakeFn(0), "cnm_repeat": _FakeFn(0),
                            "cnm_run_args_bytes": _FakeFn(24)})()


@pytest.fixture(autouse=True)
def _fake_entry_points(monkeypatch):
    """The launcher binds cnm_launch through a PYFUNCTYPE, which needs a real library: the fakes are called as is."""
    from cutlass_nm.families.vnm_sm90 import family as vnm_sm90

    monkeypatch.setattr(vnm_sm90, "gil_holding", lambda lib, name, *types: getattr(lib, name))
    monkeypatch.setattr(launch, "gil_holding", lambda lib, name, *types: getattr(lib, name))
    monkeypatch.setattr(vnm_sm90, "stream_of", lambda x: 7)
    monkeypatch.setattr(launch, "_raw_stream", lambda index: 7)


def test_a_repeat_packs_the_plan_its_streams_scratch_and_the_bias_once(monkeypatch):
    """``steady`` after a first call: ``cnm_repeat`` on the packed (plan, the stream's transpose scratch, bias) with
    only x, y and the stream per call; a call on another stream takes the launcher (a plain launch)."""
    from cutlass_nm.families.vnm_sm90 import family as vnm_sm90

    workspace = torch.empty(1 << 16, dtype=torch.uint8)
    monkeypatch.setattr(vnm_sm90, "workspace_buffer", lambda device, nbytes, stream: workspace)
    lib = _fake_lib()
    launcher = FAM.bind(lib, FAM.heuristic(Problem(2048, 4096, 4096, F16)), F16)
    w, _ = cutlass_nm.prune(torch.randn(256, 512, dtype=torch.float16), "128:2:8")
    bias = torch.randn(256, dtype=torch.float16)
    x, y = torch.randn(5, 512, dtype=torch.float16), torch.empty(5, 256, dtype=torch.float16)
    launcher(x, w, bias, y)
    go = launcher.steady(x, w, bias, y)
    x2, y2 = torch.randn(5, 512, dtype=torch.float16), torch.empty(5, 256, dtype=torch.float16)
    go(x2, w, bias, y2)
    assert lib.cnm_repeat.calls == [(go.first_address, x2.data_ptr(), y2.data_ptr(), 7)]
    packed = vnm_sm90.RepeatArgs.from_address(go.first_address)
    plan = lib.cnm_launch.calls[0][0]
    assert (packed.plan, packed.xt, packed.bias) == (ctypes.addressof(plan), workspace.data_ptr(), bias.data_ptr())
    monkeypatch.setattr(launch, "_raw_stream", lambda index: 8)
    go(x2, w, bias, y2)
    assert len(lib.cnm_repeat.calls) == 1 and lib.cnm_launch.calls[-1][0] is plan


def test_a_plan_is_built_once_per_weight_and_m_then_only_pointers_change():
    cfg = FAM.heuristic(Problem(2048, 4096, 4096, F16))
    lib = _fake_lib()
    launcher = FAM.bind(lib, cfg, F16)
    w, _ = cutlass_nm.prune(torch.randn(256, 512, dtype=torch.float16), "128:2:8")
    for m in (5, 5, 9):
        x, y = torch.randn(m, 512, dtype=torch.float16), torch.empty(m, 256, dtype=torch.float16)
        launcher(x, w, None, y)
        _, x_ptr, xt_ptr, y_ptr, bias_ptr, stream = lib.cnm_launch.calls[-1]
        assert (x_ptr, y_ptr, bias_ptr, stream) == (x.data_ptr(), y.data_ptr(), None, 7) and xt_ptr
    assert [c[6] for c in lib.cnm_plan.calls] == [5, 9]  # m: one plan per (weight, m)
    assert lib.cnm_launch.calls[0][0] is lib.cnm_launch.calls[1][0]
    n, m, k, padded_k, ldx, _, v = lib.cnm_plan.calls[1][5:]
    assert (n, m, k, padded_k, ldx, v) == (256, 9, 512, w.padded_k, 16, 128)
    xt = torch.empty(w.padded_k, 16, dtype=torch.float16)  # x already transposed: the call passes no x
    bias = torch.randn(256, dtype=torch.float16)
    launcher(torch.randn(9, 512, dtype=torch.float16), w, bias, torch.empty(9, 256, dtype=torch.float16), xt)
    assert lib.cnm_launch.calls[-1][1:5] == (None, xt.data_ptr(), lib.cnm_launch.calls[-1][3], bias.data_ptr())
    assert len(lib.cnm_plan.calls) == 2
    lib.cnm_launch.result = 1002  # a CUDA error from the launch names the family and the problem
    with pytest.raises(cutlass_nm.LaunchError, match=r"vnm_sm90: CUDA error 2 .*\(9, 256, 512\)"):
        launcher(torch.randn(9, 512, dtype=torch.float16), w, None, torch.empty(9, 256, dtype=torch.float16))


def test_tile_m_128_hands_v64_weights_to_its_tile_m_64_twin():
    from cutlass_nm.families.vnm_sm90 import family as vnm_sm90

    cfg = FAM.heuristic(Problem(2048, 4096, 4096, F16))
    assert cfg.tile_m == 128
    calls = []
    launcher = FAM.bind(_fake_lib(), cfg, F16, [lambda *a: calls.append(a)])
    assert isinstance(launcher, vnm_sm90._Launcher)
    w, _ = cutlass_nm.prune(torch.randn(128, 256, dtype=torch.float16), "64:2:8")
    launcher(torch.randn(4, 256), w, None, torch.empty(4, 128))
    assert len(calls) == 1 and calls[0][1] is w
    w32 = compress_vnm(torch.randn(64, 256, dtype=torch.float16), "32:2:8", prune=True)  # prune refuses V = 32
    with pytest.raises(cutlass_nm.ShapeError, match="V % tile_m"):
        launcher(torch.randn(4, 256), w32, None, torch.empty(4, 64))
    alone = FAM.bind(_fake_lib(), cfg, F16)  # bound without its twin: V = 64 is a shape error, not a lookup
    with pytest.raises(cutlass_nm.ShapeError, match="V % tile_m"):
        alone(torch.randn(4, 256), w, None, torch.empty(4, 128))


def test_get_kernel_resolves_the_twin_before_bind(monkeypatch):
    """kernels.get_kernel loads a family's helper kernels first and hands their launchers to bind()."""
    from cutlass_nm import kernels

    cfg = FAM.heuristic(Problem(2048, 4096, 4096, F16))
    (twin_kid,) = FAM.helpers(cfg, F16)
    twin = object()
    monkeypatch.setattr(kernels, "_LOADED", {twin_kid: twin})
    monkeypatch.setattr(kernels, "is_cached", lambda *a: True)
    monkeypatch.setattr(kernels, "build", lambda *a: type("Artifact", (), {"path": "lib.so"})())
    monkeypatch.setattr(kernels.ctypes, "CDLL", lambda path: _fake_lib())
    launcher = kernels.get_kernel(("vnm_sm90", cfg, F16))
    assert launcher.twin is twin and kernels.get_kernel(("vnm_sm90", cfg, F16)) is launcher


def test_producer_rejects_what_it_cannot_address():
    huge = Problem(2**17, 4096, 2**14, F16)  # xt would need offsets past 2^31 elements
    assert "2^31" in FAM.check(Config(tile_m=128, tile_n=256, consumers=2), huge)
    assert FAM.check(Config(tile_m=128, tile_n=256, consumers=2), Problem(2**16, 4096, 2**14, F16)) is None


@pytest.mark.nvcc
@pytest.mark.slow_nvcc  # 80 s per probe on 2 cores; the GPU tests check the same addresses end to end
def test_producer_addresses_match_cute(tmp_path):
    """The producer's shared-memory addresses (unswizzled CuTe offsets split per row pass, then the 128B
    swizzle) equal CuTe's swizzled layout of B for every element of every stage: the template's host probe, for
    tile_n 256, 128 and 64 (4, 8 and 16 gathered rows per producer pass), compiled in parallel."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from cutlass_nm.build.compiler import cutlass_include_dirs, nvcc_path

    def probe(tile_n: int) -> tuple[int, int]:
        cfg = Config(tile_m=64, tile_n=tile_n, tile_k=64, stages=3)
        src = tmp_path / f"probe{tile_n}.cu"
        src.write_text(FAM.source(cfg, F16))
        exe = tmp_path / f"probe{tile_n}"
        cmd = [nvcc_path(), "-std=c++17", "-O1", "--expt-relaxed-constexpr", "-DCNM_HOST_PROBE",
               "-gencode=arch=compute_90a,code=compute_90a", *[f"-I{d}" for d in cutlass_include_dirs()], str(src),
               "-o", str(exe)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=900)
        bad, checked = map(int, subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split())
        return bad, checked

    tiles = (256, 128, 64)
    with ThreadPoolExecutor(len(tiles)) as pool:
        results = dict(zip(tiles, pool.map(probe, tiles), strict=True))
    for tile_n, (bad, checked) in results.items():
        assert checked == 3 * 64 * tile_n and bad == 0, (tile_n, bad, checked)

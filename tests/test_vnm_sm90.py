"""vnm_sm90 without a GPU: config space and validity, emitted source, hostile records, the kernel layout."""

from __future__ import annotations

import itertools

import pytest
import torch

import cutlass_nm
from cutlass_nm import ConfigError
from cutlass_nm.families import FAMILIES, KernelTypes, Problem, get_family
from cutlass_nm.families.vnm_sm90.family import Config, gathered_k, kernel_layout
from cutlass_nm.formats import Sparse24Weight, meta_sm90

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


def test_records_before_the_transpose_and_gather_keys_keep_the_original_kernel():
    old = {"tile_m": 128, "tile_n": 256, "tile_k": 64, "stages": 5, "consumers": 2}
    cfg = Config.from_record(old)
    assert cfg.transpose == 0 and cfg.gather == 0
    src = FAM.source(cfg, F16)
    assert "constexpr int kTranspose = 0;" in src and "constexpr int kGather = 0;" in src
    new = Config.from_record({**old, "transpose": 1, "gather": 1})
    src = FAM.source(new, F16)
    assert "constexpr int kTranspose = 1;" in src and "constexpr int kGather = 1;" in src
    for key in ("transpose", "gather"):
        with pytest.raises(ConfigError):
            Config.from_record({**old, key: 2})


def test_v64_fallback_keeps_the_transpose_and_gather_variants():
    from cutlass_nm.families.vnm_sm90.family import fallback_config

    p = Problem(2048, 4096, 4096, F16)
    for tr, g in itertools.product((0, 1), (0, 1)):
        cfg = Config(tile_m=128, tile_n=256, tile_k=64, stages=5, consumers=2, transpose=tr, gather=g)
        twin = fallback_config(cfg, p)
        assert twin.tile_m == 64 and (twin.transpose, twin.gather) == (tr, g) and FAM.check(twin, p) is None


@pytest.mark.parametrize("pattern,shape", [("64:2:8", (130, 200)), ("128:2:7", (256, 101)), ("64:2:16", (64, 64))])
def test_kernel_layout_computes_the_product(pattern, shape):
    """The padded gathered weight, applied to x gathered by the padded index per V-block, equals x·Wᵀ."""
    n, k = shape
    g = torch.Generator().manual_seed(0)
    w, _ = cutlass_nm.prune(torch.randn(n, k, generator=g), pattern)
    x = torch.randn(5, k, generator=g, dtype=torch.float64)
    values, e, gidx = kernel_layout(w, 64)
    kg = gathered_k(w)
    assert kg % 128 == 0 and values.shape == (n, kg // 2) and gidx.shape == (-(-n // w.pattern.v), kg)
    assert e.numel() == meta_sm90.padded_shape(n, kg, 64)[0] * kg // 8
    meta = meta_sm90.from_sm90(e, n, kg, 64)
    dense = Sparse24Weight(values, meta, (n, kg)).to_dense().double()
    xp = torch.cat((torch.nn.functional.pad(x, (0, w.padded_k - k)), torch.zeros(5, 1, dtype=x.dtype)), 1)
    idx = torch.where(gidx < 0, w.padded_k, gidx).long()  # -1: the kernel zero-fills
    v = w.pattern.v
    y = torch.cat([xp[:, idx[r // v]] @ dense[r:r + v].T for r in range(0, n, v)], 1)
    torch.testing.assert_close(y, x @ w.to_dense().double().T)


class _FakeFn:
    argtypes = restype = None

    def __call__(self, *args):
        return 64


def test_tile_m_128_hands_v64_weights_to_its_tile_m_64_twin(monkeypatch):
    from cutlass_nm import kernels
    from cutlass_nm.families.vnm_sm90 import family as vnm_sm90

    calls = []
    monkeypatch.setattr(kernels, "get_kernel", lambda kid: lambda *a: calls.append(kid))
    lib = type("Lib", (), {"cnm_run": _FakeFn(), "cnm_meta_atom_k": _FakeFn(), "cnm_transpose": _FakeFn()})()
    cfg = FAM.heuristic(Problem(2048, 4096, 4096, F16))
    assert cfg.tile_m == 128
    launcher = vnm_sm90._Launcher(lib, cfg, F16)
    w, _ = cutlass_nm.prune(torch.randn(128, 256), "64:2:8")
    launcher(torch.randn(4, 256), w, None, torch.empty(4, 128))
    (kid,) = calls
    assert kid[0] == "vnm_sm90" and kid[1].tile_m == 64 and kid[1].consumers == 1 and kid[2] == F16
    assert FAM.check(kid[1], Problem(4, 128, 256, F16)) is None
    w32, _ = cutlass_nm.prune(torch.randn(64, 256), "32:2:8")
    with pytest.raises(cutlass_nm.ShapeError, match="V % tile_m"):
        launcher(torch.randn(4, 256), w32, None, torch.empty(4, 64))


def test_batched_producer_rejects_what_it_cannot_run():
    p = Problem(2048, 4096, 4096, F16)
    assert "TMA gather" in FAM.check(Config(tile_m=128, tile_n=256, consumers=2, gather=1, producer=1), p)
    huge = Problem(2**17, 4096, 2**14, F16)  # xt would need offsets past 2^31 elements
    assert "2^31" in FAM.check(Config(tile_m=128, tile_n=256, consumers=2, producer=1), huge)
    assert FAM.check(Config(tile_m=128, tile_n=256, consumers=2, producer=0), huge) is None


@pytest.mark.nvcc
@pytest.mark.parametrize("tile_n", [256, 128, 64])  # 4, 8 and 16 gathered rows per producer pass
def test_batched_producer_addresses_match_cute(tmp_path, tile_n):
    """The batched producer's shared-memory addresses (unswizzled CuTe offsets split per row pass, then the 128B
    swizzle) equal CuTe's swizzled layout of B for every element of every stage: the template's host probe."""
    import subprocess

    from cutlass_nm.build.compiler import cutlass_include_dirs, nvcc_path

    cfg = Config(tile_m=64, tile_n=tile_n, tile_k=64, stages=3, transpose=1, producer=1)
    src = tmp_path / "probe.cu"
    src.write_text(FAM.source(cfg, F16))
    exe = tmp_path / "probe"
    cmd = [nvcc_path(), "-std=c++17", "-O1", "--expt-relaxed-constexpr", "-DCNM_HOST_PROBE",
           "-gencode=arch=compute_90a,code=compute_90a", *[f"-I{d}" for d in cutlass_include_dirs()], str(src),
           "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=900)
    bad, checked = map(int, subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split())
    assert checked == 3 * 64 * tile_n and bad == 0

"""vnm_fp8_sm90 without a GPU: config space and validity, emitted source, hostile records, the kernel layout, the
launcher's plans and C argument order, and the producer's K-major addresses against CuTe (nvcc)."""

from __future__ import annotations

import itertools

import pytest
import torch
from launch_helpers import entries_by_name

import cutlass_nm
from cutlass_nm import ConfigError
from cutlass_nm.families import FAMILIES, KernelTypes, Problem, get_family
from cutlass_nm.families.vnm_fp8_sm90.family import Config, kernel_layout, smem_bytes
from cutlass_nm.families.vnm_sm90.family import K_ALIGN
from cutlass_nm.formats import Sparse24Weight, meta_sm90
from cutlass_nm.formats.fp8 import E4M3, VNMFP8Weight

FAM = get_family("vnm_fp8_sm90")
T = KernelTypes("e4m3", "bf16", False)


def _weight(pattern: str, n: int, k: int, seed: int = 0) -> VNMFP8Weight:
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)).bfloat16()
    return cutlass_nm.prune(w, pattern, dtype=E4M3)[0]


def test_registered_for_fp8_vnm_weights_only():
    assert FAMILIES["vnm_fp8_sm90"] is FAM and FAM.arch == "sm_90a" and FAM.input_dtypes == ("e4m3",)
    assert FAM.runs(VNMFP8Weight) and not FAM.runs(cutlass_nm.formats.vnm.VNMWeight)


def test_space_validity():
    p = Problem(2048, 4096, 4096, T, "128:2:8")
    points = [Config(**dict(zip(Config.SPACE, v, strict=True))) for v in itertools.product(*Config.SPACE.values())]
    verdicts = {c: FAM.check(c, p) for c in points}
    assert all(isinstance(r, str) for c, r in verdicts.items() if c.consumers == 2 and c.tile_m == 64)
    assert "accumulators" in FAM.check(Config(tile_m=128, tile_n=256, consumers=1), p)
    assert "V-block" in FAM.check(Config(tile_m=128), Problem(2048, 4096, 4096, T, "64:2:8"))
    assert "e4m3" in FAM.check(Config(), Problem(2048, 4096, 4096, KernelTypes("bf16", "bf16", False), "128:2:8"))
    assert "output dtype" in FAM.check(Config(), Problem(2048, 4096, 4096, KernelTypes("e4m3", "f32", False),
                                                         "128:2:8"))
    assert "2^31" in FAM.check(Config(), Problem(2**17, 4096, 2**14, T, "128:2:8"))
    for pattern in ("128:2:8", "64:2:8", "128:2:16"):
        for m in (2, 64, 4096):
            q = Problem(m, 4096, 4096, T, pattern)
            assert FAM.check(FAM.heuristic(q), q) is None


@pytest.mark.parametrize("types", [T, KernelTypes("e4m3", "f16", True)])
def test_source_interpolates_only_validated_values(types):
    cfg = Config(tile_m=128, tile_n=256, stages=4, consumers=2, cluster=2)
    src = FAM.source(cfg, types)
    assert "${" not in src
    assert "constexpr int kTileM = 128;" in src and "constexpr int kTileN = 256;" in src
    assert "constexpr int kStages = 4;" in src and "constexpr int kClusterN = 2;" in src
    assert ("constexpr bool kHasBias = true;" in src) == types.bias
    assert f"sizeof(SharedStorage) == {smem_bytes(cfg)}" in src
    assert ("cutlass::half_t;" if types.out_dtype == "f16" else "cutlass::bfloat16_t;") in src
    assert "quantize_rows_kernel" in src  # the shared per-token quantizer is spliced in


@pytest.mark.parametrize("record", [
    {"tile_m": "64); system(\"x\"); (", "tile_n": 128},
    {"tile_m": 256},
    {"tile_n": 128.0},
    {"stages": 2},
    {"cluster": True},
    {"tile_k": 128},
    {},
])
def test_from_record_rejects_hostile_records(record):
    with pytest.raises(ConfigError):
        Config.from_record(record)


@pytest.mark.parametrize("pattern,shape", [("64:2:8", (130, 200)), ("128:2:7", (256, 101)), ("128:2:16", (128, 300))])
def test_kernel_layout_computes_the_product(pattern, shape):
    """The padded gathered e4m3 weight (row scales applied), against x gathered by the padded index per V-block,
    equals x·Wᵀ of the FP8 weight."""
    n, k = shape
    w = _weight(pattern, n, k)
    x = torch.randn(5, k, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    values, e, gidx = kernel_layout(w, 128)
    kg = w.gathered_k(K_ALIGN)
    assert values.dtype == E4M3 and values.shape == (n, kg // 2) and gidx.shape == (-(-n // w.pattern.v), kg)
    meta = meta_sm90.from_sm90(e, n, kg, 128, 8)
    dense = Sparse24Weight.from_groups(values.float(), meta, (n, kg)).to_dense().double() * w.scale.double()[:, None]
    xp = torch.cat((torch.nn.functional.pad(x, (0, w.padded_k - k)), torch.zeros(5, 1, dtype=x.dtype)), 1)
    idx = torch.where(gidx < 0, w.padded_k, gidx).long()  # -1: the kernel zero-fills
    v = w.pattern.v
    y = torch.cat([xp[:, idx[r // v]] @ dense[r:r + v].T for r in range(0, n, v)], 1)
    torch.testing.assert_close(y, x @ w.to_dense().double().T, rtol=1e-5, atol=1e-5)  # to_dense: float32


class _FakeFn:
    argtypes = restype = None

    def __init__(self, result: int = 128) -> None:
        self.result, self.calls = result, []

    def __call__(self, *args):
        self.calls.append(args)
        return self.result


def _lib(fam, monkeypatch, stream: dict | None = None):
    """A stand-in library for the launcher (every entry records its calls), on a fake stream 7 (or ``stream``'s
    "now"), outside any graph capture."""
    import ctypes

    stream = stream if stream is not None else {"now": 7}
    entries_by_name(monkeypatch, fam)
    monkeypatch.setattr(fam, "stream_of", lambda x: stream["now"])
    monkeypatch.setattr("cutlass_nm.families.launch._raw_stream", lambda index: stream["now"])
    monkeypatch.setattr("cutlass_nm.families.launch._stream_capturing", lambda: False)
    return type("Lib", (), {"cnm_meta_atom_k": _FakeFn(), "cnm_plan_bytes": _FakeFn(), "cnm_plan": _FakeFn(0),
                            "cnm_launch": _FakeFn(0), "cnm_quantize_rows": _FakeFn(0),
                            "cnm_launch_quantized": _FakeFn(0),
                            "cnm_run_args_bytes": _FakeFn(ctypes.sizeof(fam.QuantizedCall))})()


def test_a_plan_per_weight_and_m_then_only_pointers_change(monkeypatch):
    from cutlass_nm.families.vnm_fp8_sm90 import family as fam

    lib = _lib(fam, monkeypatch)
    launcher = FAM.bind(lib, Config(), T)
    w = _weight("128:2:8", 256, 512)
    for m in (5, 5, 20):
        x, y, sx = torch.zeros(m, 512, dtype=E4M3), torch.empty(m, 256, dtype=torch.bfloat16), torch.ones(m)
        launcher(x, w, None, y, sx)
    assert [c[7] for c in lib.cnm_plan.calls] == [5, 20]  # one plan per (weight, m)
    values, e, gidx = w.layout(launcher.layout_key, launcher.build_layout)
    plan = lib.cnm_plan.calls[1]
    assert plan[1:5] == (values.data_ptr(), e.data_ptr(), gidx.data_ptr(), w.scale.data_ptr())
    assert plan[6:] == (256, 20, 512, w.padded_k, 32, gidx.shape[1], 128)  # ldx: m rounded up to 16
    call = lib.cnm_launch.calls[-1]
    assert call[0] is plan[0] and call[1] == x.data_ptr() and call[3:7] == (sx.data_ptr(), 1, y.data_ptr(), None)
    assert call[2] != x.data_ptr() and call[7] == 7
    launcher(x, w, None, y, torch.ones(1))
    assert lib.cnm_launch.calls[-1][4] == 0  # one scale for the tensor
    lib.cnm_launch.result = 1002
    with pytest.raises(cutlass_nm.LaunchError, match=r"vnm_fp8_sm90: CUDA error 2 .*\(20, 256, 512\)"):
        launcher(x, w, None, y, sx)
    with pytest.raises(cutlass_nm.ShapeError, match="V % tile_m"):
        launcher(torch.zeros(5, 512, dtype=E4M3), _weight("64:2:8", 128, 512), None, y[:5], sx[:5])


def test_a_16bit_x_repeat_packs_its_plan_and_the_streams_scratch(monkeypatch):
    """A 16-bit x's repeat: one C call on the plan of (weight, m) with the scratch of the first call's stream (xT
    first, then e4m3 x and the per-token scales, 16-byte aligned); another stream quantizes into fresh tensors and
    launches per call; a kernel whose packed call differs in size is refused."""
    import ctypes

    from cutlass_nm.families.vnm_fp8_sm90 import family as fam

    stream = {"now": 7}
    lib = _lib(fam, monkeypatch, stream)
    launcher = FAM.bind(lib, Config(), T)
    w = _weight("128:2:8", 256, 512)
    x, y = torch.zeros(20, 512, dtype=torch.bfloat16), torch.empty(20, 256, dtype=torch.bfloat16)
    go = launcher.steady(x, w, None, y)
    (plan_call,) = lib.cnm_plan.calls
    scratch = go.keep[-1]
    xt_bytes = w.padded_k * 32
    gidx = w.layout(launcher.layout_key, launcher.build_layout)[2]
    assert plan_call[5] == scratch.data_ptr() and plan_call[6:] == (256, 20, 512, w.padded_k, 32, gidx.shape[1], 128)
    x2, y2 = torch.zeros(20, 512, dtype=torch.bfloat16), torch.empty(20, 256, dtype=torch.bfloat16)
    go(x2, w, None, y2)
    address, gx, gy, gstream = lib.cnm_launch_quantized.calls[0]
    call = fam.QuantizedCall.from_address(address)
    assert (gx, gy, gstream) == (x2.data_ptr(), y2.data_ptr(), 7) and call.plan == ctypes.addressof(plan_call[0])
    assert call.xt == scratch.data_ptr() and call.q == scratch.data_ptr() + xt_bytes
    assert call.scale == call.q + 20 * 512 and call.bias is None and call.x_bf16 == 1
    assert scratch.numel() >= xt_bytes + 20 * 512 + 4 * 20
    stream["now"] = 9  # another stream: fresh quantized tensors, the per-call launch
    go(x2, w, None, y2)
    assert len(lib.cnm_launch_quantized.calls) == 1 and lib.cnm_quantize_rows.calls[-1][0] == x2.data_ptr()
    assert lib.cnm_launch.calls[-1][5] == y2.data_ptr() and lib.cnm_launch.calls[-1][7] == 9
    lib.cnm_run_args_bytes = _FakeFn(ctypes.sizeof(fam.QuantizedCall) + 8)
    with pytest.raises(cutlass_nm.LaunchError, match=r"packed arguments .* rebuild the kernel cache"):
        FAM.bind(lib, Config(), T)


@pytest.mark.nvcc
@pytest.mark.slow_nvcc  # a minute per probe on 2 cores; the GPU tests check the same addresses end to end
def test_producer_addresses_match_cute(tmp_path):
    """The producer's K-major 128B-swizzled chunk addresses equal CuTe's layout of B for every element of every
    stage (the template's host probe), for tile_n 256 and 64."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from cutlass_nm.build.compiler import cutlass_include_dirs, nvcc_path

    def probe(tile_n: int) -> tuple[int, int]:
        cfg = Config(tile_m=64, tile_n=tile_n, stages=3, consumers=1)
        src = tmp_path / f"probe{tile_n}.cu"
        src.write_text(FAM.source(cfg, T))
        exe = tmp_path / f"probe{tile_n}"
        cmd = [nvcc_path(), "-std=c++17", "-O1", "--expt-relaxed-constexpr", "-DCNM_HOST_PROBE",
               "-gencode=arch=compute_90a,code=compute_90a", *[f"-I{d}" for d in cutlass_include_dirs()], str(src),
               "-o", str(exe)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=900)
        bad, checked = map(int, subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split())
        return bad, checked

    tiles = (256, 64)
    with ThreadPoolExecutor(len(tiles)) as pool:
        results = dict(zip(tiles, pool.map(probe, tiles), strict=True))
    for tile_n, (bad, checked) in results.items():
        assert checked == 3 * 128 * tile_n and bad == 0, (tile_n, bad, checked)


def test_db_records_take_fp8_vnm_problems_only():
    from cutlass_nm.store.validate import RecordError, validate_problem

    rec = {"family": "vnm_fp8_sm90", "pattern": "128:2:8", "m_bucket": 2048, "n": 4096, "k": 4096, "dtype": "e4m3",
           "out_dtype": "bf16", "layout": "tn", "bias": False, "alignment": 16}
    assert validate_problem(rec).family == "vnm_fp8_sm90"
    with pytest.raises(RecordError, match="does not run"):
        validate_problem({**rec, "pattern": "2:4"})
    with pytest.raises(RecordError, match="e4m3 inputs, not f16"):
        validate_problem({**rec, "dtype": "f16"})

"""vnm_sm80 without a GPU: config space and validity, emitted source, hostile records, the kernel layout."""

from __future__ import annotations

import itertools

import pytest
import torch
from launch_helpers import Recorder, entries_by_name

import cutlass_nm
from cutlass_nm import ConfigError
from cutlass_nm.families import FAMILIES, KernelTypes, Problem, get_family
from cutlass_nm.families.vnm_sm80.family import SHAPES, Config, fallback_config, gathered_k, kernel_layout
from cutlass_nm.formats import Sparse24Weight, meta_sm80
from cutlass_nm.formats.vnm import compress_vnm

FAM = get_family("vnm_sm80")
F16 = KernelTypes("f16", "f16", False)


def test_registered_for_vnm_weights():
    assert FAMILIES["vnm_sm80"] is FAM
    assert FAM.weight is cutlass_nm.formats.vnm.VNMWeight and FAM.arch == "sm_80"


def test_space_validity():
    p = Problem(2048, 4096, 4096, F16)
    points = [Config(**dict(zip(Config.SPACE, v, strict=True))) for v in itertools.product(*Config.SPACE.values())]
    valid = [c for c in points if FAM.check(c, p) is None]
    assert valid and all(SHAPES[(c.tile_m, c.tile_n, c.tile_k)] == (c.warp_m, c.warp_n) for c in valid)
    assert {c.tile_m for c in valid} == {64, 128}
    assert "not instantiated" in FAM.check(Config(tile_m=128, tile_n=128, tile_k=64, warp_m=32, warp_n=32), p)
    assert "shared memory" in FAM.check(Config(tile_m=128, tile_n=256, tile_k=64, warp_m=64, warp_n=64, stages=4), p)
    assert FAM.check(Config(tile_m=128, tile_n=256, tile_k=64, warp_m=64, warp_n=64, stages=3), p) is None
    for m in (1, 64, 4096):
        q = Problem(m, 4096, 4096, F16)
        assert FAM.check(FAM.heuristic(q), q) is None


def test_v_divisibility_and_heuristic_follow_the_pattern():
    big = Config(tile_m=128, tile_n=128, tile_k=64, warp_m=64, warp_n=64)
    for pattern, tile_m in (("128:2:8", 128), ("64:2:16", 64), ("2:4", 128)):
        q = Problem(2048, 4096, 4096, F16, pattern)
        cfg = FAM.heuristic(q)
        assert cfg.tile_m == tile_m and FAM.check(cfg, q) is None
    assert "must divide V=64" in FAM.check(big, Problem(2048, 4096, 4096, F16, "64:2:8"))
    assert "fp16/bf16 only" in FAM.check(big, Problem(2048, 4096, 4096, KernelTypes("f32", "f32", False)))


def test_every_tile_has_a_tile_m_64_twin():
    p = Problem(2048, 4096, 4096, F16)
    for (tm, tn, tk), (wm, wn) in SHAPES.items():
        cfg = Config(tile_m=tm, tile_n=tn, tile_k=tk, warp_m=wm, warp_n=wn, stages=3)
        twin = fallback_config(cfg)
        assert twin.tile_m == 64 and twin.tile_n == tn and FAM.check(twin, p) is None


@pytest.mark.parametrize("types", [F16, KernelTypes("bf16", "f32", True)])
def test_source_interpolates_only_validated_values(types):
    cfg = Config(tile_m=128, tile_n=256, tile_k=64, warp_m=64, warp_n=64, stages=3, swizzle=4)
    src = FAM.source(cfg, types)
    assert "${" not in src
    assert "constexpr int kTileM = 128;" in src and "constexpr int kTileN = 256;" in src
    assert "constexpr int kStages = 3;" in src and "GemmIdentityThreadblockSwizzle<4>" in src
    assert ("constexpr bool kHasBias = true;" in src) == types.bias
    assert "using ElementOut = float;" in src if types.out_dtype == "f32" else "cutlass::half_t;" in src


@pytest.mark.parametrize("record", [
    {"tile_m": "64); system(\"x\"); (", "tile_n": 128},
    {"tile_m": 96},
    {"tile_m": True},
    {"tile_n": 128.0},
    {"stages": 7},
    {"swizzle": "2"},
    {"tile_k": 64, "consumers": 1},
    {},
    [("tile_m", 64)],
])
def test_from_record_rejects_hostile_records(record):
    with pytest.raises(ConfigError):
        Config.from_record(record)


def test_from_record_roundtrip():
    cfg = Config(tile_m=128, tile_n=64, tile_k=128, warp_m=64, warp_n=32, stages=3, swizzle=8)
    assert Config.from_record(cfg.to_record()) == cfg


@pytest.mark.parametrize("pattern,shape", [("64:2:8", (130, 200)), ("128:2:7", (256, 101)), ("64:2:16", (64, 64)),
                                           ("128:2:10", (300, 333))])
def test_kernel_layout_computes_the_product(pattern, shape):
    """The padded gathered weight, applied per V-block to xT (plus its zero row) gathered by the padded index,
    equals x·Wᵀ: what the kernel computes."""
    n, k = shape
    g = torch.Generator().manual_seed(0)
    w, _ = cutlass_nm.prune(torch.randn(n, k, generator=g).half(), pattern)
    x = torch.randn(5, k, generator=g, dtype=torch.float64)
    values, e, gidx, e_rows = kernel_layout(w)
    kg = gathered_k(w)
    assert kg % 128 == 0 and values.shape == (n, kg // 2) and gidx.shape == (-(-n // w.pattern.v), kg)
    assert (e_rows, kg // 16) == meta_sm80.padded_shape(n, kg) and e.numel() == e_rows * kg // 16
    assert int(gidx.min()) >= 0 and int(gidx.max()) == w.padded_k  # padding names the zero row
    meta = meta_sm80.from_sm80(e, n, kg)
    dense = Sparse24Weight.from_groups(values, meta, (n, kg)).to_dense().double()
    xt = torch.zeros(w.padded_k + 1, 5, dtype=x.dtype)
    xt[:k] = x.T
    v = w.pattern.v
    y = torch.cat([(dense[r:r + v] @ xt[gidx[r // v].long()]).T for r in range(0, n, v)], 1)
    torch.testing.assert_close(y, x @ w.to_dense().double().T)


class _FakeFn:
    argtypes = restype = None

    def __call__(self, *args):
        return 0


def _lib(vnm_sm80, monkeypatch, **entries):
    """A stand-in library: ``cnm_run``, its packed launch and the packed arguments' size."""
    import ctypes
    import types

    entries_by_name(monkeypatch, vnm_sm80)
    return types.SimpleNamespace(**{"cnm_run": _FakeFn(), "cnm_launch": _FakeFn(),
                                    "cnm_run_args_bytes": lambda: ctypes.sizeof(vnm_sm80.RunArgs), **entries})


def test_tile_m_128_hands_v64_weights_to_its_twin(monkeypatch):
    from cutlass_nm.families.vnm_sm80 import family as vnm_sm80

    lib = _lib(vnm_sm80, monkeypatch)
    cfg = FAM.heuristic(Problem(2048, 4096, 4096, F16))
    assert cfg.tile_m == 128
    (kid,) = FAM.helpers(cfg, F16)  # resolved by kernels.get_kernel before bind
    assert kid == ("vnm_sm80", fallback_config(cfg), F16) and kid[1].tile_m == 64
    assert FAM.helpers(kid[1], F16) == []
    calls = []
    launcher = FAM.bind(lib, cfg, F16, [lambda *a: calls.append(a)])
    assert isinstance(launcher, vnm_sm80._Launcher)
    w, _ = cutlass_nm.prune(torch.randn(128, 256, dtype=torch.float16), "64:2:8")
    launcher(torch.randn(4, 256), w, None, torch.empty(4, 128))
    assert len(calls) == 1 and calls[0][1] is w
    w32 = compress_vnm(torch.randn(64, 256, dtype=torch.float16), "32:2:8", prune=True)  # prune refuses V = 32
    with pytest.raises(cutlass_nm.ShapeError, match="V % tile_m"):
        launcher(torch.randn(4, 256), w32, None, torch.empty(4, 64))



def test_repeat_packs_the_first_calls_arguments_with_its_streams_scratch(monkeypatch):
    """vnm_sm80's repeat: cnm_run's arguments but x, y and the stream packed once (the transpose scratch the
    workspace of the first call's stream, held by the repeat); on another stream the launcher runs it per call;
    under graph capture the per-call path takes a scratch of its own."""
    import ctypes

    from cutlass_nm.families.vnm_sm80 import family as vnm_sm80

    seen = []

    def cnm_launch(address, x, y, stream):
        seen.append((vnm_sm80.RunArgs.from_buffer_copy(vnm_sm80.RunArgs.from_address(address)), x, y, stream))
        return 0

    stream = {"now": 3}
    monkeypatch.setattr(vnm_sm80, "stream_of", lambda x: stream["now"])
    monkeypatch.setattr("cutlass_nm.families.launch._raw_stream", lambda index: stream["now"])
    monkeypatch.setattr("cutlass_nm.families.launch._stream_capturing", lambda: False)
    lib = _lib(vnm_sm80, monkeypatch, cnm_run=Recorder(0), cnm_launch=cnm_launch)
    cfg = FAM.heuristic(Problem(20, 256, 256, F16))
    launcher = FAM.bind(lib, cfg, F16, [])
    w, _ = cutlass_nm.prune(torch.randn(128, 256, dtype=torch.float16), "64:2:8")
    x, y = torch.randn(20, 256, dtype=torch.float16), torch.empty(20, 128, dtype=torch.float16)
    launcher(x, w, None, y)
    first = lib.cnm_run.calls[0]
    go = launcher.steady(x, w, None, y)
    x2, y2 = torch.randn(20, 256, dtype=torch.float16), torch.empty(20, 128, dtype=torch.float16)
    go(x2, w, None, y2)
    args, gx, gy, gstream = seen[0]
    assert (gx, gy, gstream) == (x2.data_ptr(), y2.data_ptr(), 3)
    assert (args.a, args.e, args.gidx, args.bias) == (*first[:3], None)
    assert args.xt == first[4] == go.keep[-1].data_ptr() and go.keep[-1].numel() >= (w.padded_k + 1) * 24 * 2
    assert (args.n, args.m, args.k, args.padded_k, args.ldx, args.kg, args.e_rows, args.v) == first[7:15]
    assert args.ldx == 24 and args.v == 64
    stream["now"] = 8  # another stream: the launcher, per call
    go(x2, w, None, y2)
    assert len(seen) == 1 and lib.cnm_run.calls[-1][3] == x2.data_ptr() and lib.cnm_run.calls[-1][-1] == 8
    stream["now"] = 3  # its own stream, capturing: the repeat and the launcher take a scratch of their own
    monkeypatch.setattr("cutlass_nm.families.launch._stream_capturing", lambda: True)
    go(x2, w, None, y2)
    assert len(seen) == 1 and lib.cnm_run.calls[-1][4] != args.xt
    launcher(x, w, None, y)
    assert lib.cnm_run.calls[-1][4] != args.xt and ctypes.sizeof(args) == lib.cnm_run_args_bytes()

def test_estimate_ranks_the_measured_fastest_first():
    """families.perfmodel's warm start: of five configs timed on the H100 at 8192^3, the fastest ranks first."""
    from cutlass_nm.families.perfmodel import rank

    specs = ["128x128x64x64x64x4x1", "128x256x64x64x64x3x1", "128x128x128x64x32x3x1", "128x64x64x64x32x6x1",
             "64x128x64x32x64x4x1"]
    cfgs = [Config.from_record(dict(zip(Config.SPACE, map(int, s.split("x")), strict=False))) for s in specs]
    for pattern in ("128:2:8", "128:2:16"):
        p = Problem(8192, 8192, 8192, F16, pattern)
        assert rank(cfgs, p)[0] == cfgs[0]
        assert all(0 < c.estimate_ms(p) < 100 for c in cfgs)

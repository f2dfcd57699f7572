"""The launchers' steady-state path (CPU, stand-in libraries): what a first call per (weight, m) prepares and later
calls reuse, when a prepared entry is rebuilt, and the rules that keep CUDA-graph capture and replay valid (a later
call allocates no workspace and builds no layout, so nothing differs between capture and replay)."""

from __future__ import annotations

import copy
import pickle
import types as pytypes

import pytest
import torch

import cutlass_nm
from cutlass_nm.families import KernelTypes, get_family
from cutlass_nm.families import launch as launch_mod
from cutlass_nm.families.launch import DeviceInfo, Prepared, prepared, vp

F16 = KernelTypes("f16", "f16", False)
F16_BIAS = KernelTypes("f16", "f16", True)


class _Recorder:
    """A stand-in C function: records its arguments (pointers as ints) and returns ``ret``."""

    argtypes = restype = None

    def __init__(self, ret: int = 0) -> None:
        self.ret, self.calls = ret, []

    def __call__(self, *args):
        self.calls.append(tuple(a.value if isinstance(a, vp) else a for a in args))
        return self.ret


def _lib(**fns):
    return pytypes.SimpleNamespace(**{"cnm_run": _Recorder(0), **fns})


@pytest.fixture(autouse=True)
def _fake_device(monkeypatch):
    """CPU stand-ins for the device queries the first call makes; the current stream is 7."""
    from cutlass_nm.families.nm_decode import family as nm_decode
    from cutlass_nm.families.sptc24_sm90 import family as sm90

    info = DeviceInfo(132, (9, 0), "fake")
    monkeypatch.setattr(sm90, "device_info", lambda dev: info)
    monkeypatch.setattr(nm_decode, "device_info", lambda dev: info)
    for mod in ("sptc24_sm90", "vnm_sm90", "nm_decode", "nm_simt", "sptc24_sm80", "vnm_sm80"):
        monkeypatch.setattr(f"cutlass_nm.families.{mod}.family.stream_handle", lambda index: 7)


def _sm90_launcher(types=F16):
    lib = _lib(cnm_workspace_size=_Recorder(4096), cnm_meta_atom_k=_Recorder(16))
    fam = get_family("sptc24_sm90")
    return fam.bind(lib, fam.Config(), types), lib


def _w24(n=128, k=256):
    return cutlass_nm.prune(torch.randn(n, k, dtype=torch.float16), "2:4")[0]


def test_second_call_reuses_the_prepared_launch(monkeypatch):
    launcher, lib = _sm90_launcher()
    w = _w24()
    x, y = torch.randn(4, 256, dtype=torch.float16), torch.empty(4, 128, dtype=torch.float16)
    launcher(x, w, None, y)
    entry = prepared(w, (launcher.token, 4))
    assert entry is not None and entry.values is w.values
    monkeypatch.setattr(launcher, "prepare", lambda *a: pytest.fail("a steady-state call prepared again"))
    x2 = torch.randn(4, 256, dtype=torch.float16)
    launcher(x2, w, None, y)
    first, second = lib.cnm_run.calls
    assert second[2] == x2.data_ptr() and second[3] == y.data_ptr() and second[-1] == 7
    assert first[:2] == second[:2] == (w.values.data_ptr(), w.layout(launcher.layout_key, None).data_ptr())
    assert first[4:-1] == second[4:-1] and first[5:8] == (128, 4, 256)
    assert len(lib.cnm_workspace_size.calls) == 1


def test_each_m_is_prepared_once(monkeypatch):
    launcher, lib = _sm90_launcher()
    w = _w24()
    built = []
    real = launcher.prepare
    monkeypatch.setattr(launcher, "prepare", lambda x, ww: built.append(x.shape[0]) or real(x, ww))
    for m in (1, 16, 1, 16, 1):
        launcher(torch.randn(m, 256, dtype=torch.float16), w, None, torch.empty(m, 128, dtype=torch.float16))
    assert built == [1, 16]
    assert [c[6] for c in lib.cnm_run.calls] == [1, 16, 1, 16, 1]


def test_new_values_are_prepared_again():
    """A weight given a new values tensor (its pointer changed) is prepared again, with the new pointer."""
    launcher, lib = _sm90_launcher()
    w = _w24()
    x, y = torch.randn(2, 256, dtype=torch.float16), torch.empty(2, 128, dtype=torch.float16)
    launcher(x, w, None, y)
    w.values = w.values.clone()
    assert prepared(w, (launcher.token, 2)) is None
    launcher(x, w, None, y)
    assert lib.cnm_run.calls[-1][0] == w.values.data_ptr() != lib.cnm_run.calls[0][0]


def test_copied_or_pickled_weights_drop_prepared_entries():
    launcher, _ = _sm90_launcher()
    w = _w24()
    launcher(torch.randn(2, 256, dtype=torch.float16), w, None, torch.empty(2, 128, dtype=torch.float16))
    key = (launcher.token, 2)
    for clone in (copy.deepcopy(w), pickle.loads(pickle.dumps(w))):
        assert isinstance(clone._layouts[key], Prepared) and prepared(clone, key) is None
        assert clone._layouts[key].args == ()


def test_prepared_workspace_outlives_a_larger_replacement(monkeypatch):
    """The shared workspace grows by replacement; a prepared launch keeps the buffer its pointer names."""
    monkeypatch.setattr(launch_mod, "_WORKSPACES", {})
    launcher, lib = _sm90_launcher()
    w = _w24()
    launcher(torch.randn(2, 256, dtype=torch.float16), w, None, torch.empty(2, 128, dtype=torch.float16))
    entry = prepared(w, (launcher.token, 2))
    (buf,) = entry.keep
    bigger = launch_mod.workspace_buffer(torch.device("cpu"), buf.numel() + 1)
    assert bigger is not buf and lib.cnm_run.calls[0][11] == buf.data_ptr()
    launcher(torch.randn(2, 256, dtype=torch.float16), w, None, torch.empty(2, 128, dtype=torch.float16))
    assert lib.cnm_run.calls[1][11] == buf.data_ptr()


def test_steady_state_allocates_no_workspace_and_builds_no_layout(monkeypatch):
    """What keeps capture valid: after the first call per (weight, m) (made before capture, as the warm-up every
    CUDA-graph recipe runs), a call neither allocates a workspace nor builds a layout, so a captured call and its
    replays read the same buffers as eager calls."""
    launcher, lib = _sm90_launcher(F16_BIAS)
    w = _w24()
    x, y, b = torch.randn(3, 256, dtype=torch.float16), torch.empty(3, 128, dtype=torch.float16), torch.randn(128)
    launcher(x, w, b, y)
    from cutlass_nm.families.sptc24_sm90 import family as sm90

    monkeypatch.setattr(sm90, "workspace_buffer", lambda *a: pytest.fail("allocated a workspace"))
    monkeypatch.setattr(w, "layout", lambda *a: pytest.fail("looked a layout up"))
    launcher(x, w, b, y)
    assert lib.cnm_run.calls[1][4] == b.data_ptr()


def test_shared_layout_cache_shares_prepared_entries():
    """SparseLinear's weight views share one layout cache per metadata storage: a view built for the next call finds
    the entry the previous view's call prepared."""
    from cutlass_nm.ops import weight_view

    launcher, _ = _sm90_launcher()
    w = _w24()
    x, y = torch.randn(2, 256, dtype=torch.float16), torch.empty(2, 128, dtype=torch.float16)
    launcher(x, weight_view(w.values, w.meta), None, y)
    assert prepared(weight_view(w.values, w.meta), (launcher.token, 2)) is not None


def test_decode_prepares_the_plan_once_and_keeps_pdl(monkeypatch):
    from cutlass_nm.families.nm_decode import family as nm_decode

    planned = []
    real = nm_decode.plan
    monkeypatch.setattr(nm_decode, "plan", lambda *a: planned.append(a) or real(*a))
    lib = _lib(cnm_max_active_clusters=_Recorder(1))
    launcher = nm_decode.Launcher(lib, nm_decode.Config(max_tokens=8, mode=2), F16, "nm_decode")
    w = cutlass_nm.prune(torch.randn(256, 512, dtype=torch.float16), "2:8", vector=32)[0]
    x, y = torch.randn(2, 512, dtype=torch.float16), torch.empty(2, 256, dtype=torch.float16)
    for _ in range(3):
        launcher(x, w, None, y)
    assert len(planned) == 1
    assert [c[-2] for c in lib.cnm_run.calls] == [0, 1, 1]
    assert len({c[1:-2] for c in lib.cnm_run.calls}) == 1  # weight pointers, sizes and plan: the same every call
    with pytest.raises(cutlass_nm.ShapeError, match="multiple of 32"):
        w1 = cutlass_nm.prune(torch.randn(256, 512, dtype=torch.float16), "2:8", vector=1)[0]
        launcher(x, w1, None, y)


def test_simt_passes_x_alignment_per_call():
    from cutlass_nm.families.nm_simt import family as nm_simt

    fam = get_family("nm_simt")
    lib = _lib(cnm_workspace=_Recorder(0))
    w = cutlass_nm.prune(torch.randn(256, 512, dtype=torch.float16), "2:8", vector=32)[0]
    launcher = nm_simt._Launcher(lib, fam.heuristic(_problem(4, 256, 512, "2:8")), F16)
    base = torch.randn(4 * 512 + 1, dtype=torch.float16)
    aligned, offset = base[: 4 * 512].view(4, 512), base[1:].view(4, 512)
    y = torch.empty(4, 256, dtype=torch.float16)
    launcher(aligned, w, None, y)
    launcher(offset, w, None, y)
    flags = [c[-2] for c in lib.cnm_run.calls]
    assert flags == [int(aligned.data_ptr() % 16 == 0), int(offset.data_ptr() % 16 == 0)]
    assert lib.cnm_run.calls[0][0] == aligned.data_ptr() and lib.cnm_run.calls[1][0] == offset.data_ptr()
    assert lib.cnm_run.calls[0][1:3] == lib.cnm_run.calls[1][1:3]


def test_simt_refusals_name_the_rule():
    from cutlass_nm.families.nm_simt import family as nm_simt

    fam = get_family("nm_simt")
    w = cutlass_nm.prune(torch.randn(256, 512, dtype=torch.float16), "2:8", vector=32)[0]
    x, y = torch.randn(4, 512, dtype=torch.float16), torch.empty(4, 256, dtype=torch.float16)
    for status, text in ((3, "shared memory"), (2, "refused the arguments"), (5, "internal error")):
        lib = _lib(cnm_run=_Recorder(status), cnm_workspace=_Recorder(0))
        launcher = nm_simt._Launcher(lib, fam.heuristic(_problem(4, 256, 512, "2:8")), F16)
        with pytest.raises(cutlass_nm.LaunchError, match=text):
            launcher(x, w, None, y)


def test_vnm_sm90_checks_a_given_xt_every_call():
    fam = get_family("vnm_sm90")
    lib = _lib(cnm_meta_atom_k=_Recorder(16), cnm_transpose=_Recorder(0))
    launcher = fam.bind(lib, fam.heuristic(_problem(4, 128, 256, "64:2:8")), F16)
    w = cutlass_nm.prune(torch.randn(128, 256, dtype=torch.float16), "64:2:8")[0]
    x, y = torch.randn(4, 256, dtype=torch.float16), torch.empty(4, 128, dtype=torch.float16)
    launcher(x, w, None, y)
    good = torch.empty(w.padded_k, 8, dtype=torch.float16)
    launcher(x, w, None, y, good)
    assert lib.cnm_run.calls[1][3] is None and lib.cnm_run.calls[1][4] == good.data_ptr()
    assert lib.cnm_run.calls[0][3] == x.data_ptr()
    with pytest.raises(cutlass_nm.ShapeError, match="xt must be"):
        launcher(x, w, None, y, torch.empty(w.padded_k, 4, dtype=torch.float16))


def _problem(m, n, k, pattern):
    from cutlass_nm.families import Problem

    return Problem(m, n, k, F16, pattern, 32)

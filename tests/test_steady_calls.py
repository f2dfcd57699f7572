"""matmul's steady state: a launcher's ``steady`` repeat of a call is what later calls of that signature run, and
anything that may replace or drop the layouts its launch points at sends the next call down the full path again."""

from __future__ import annotations

import pytest
import torch
from gpu_cases import repeats_on_two_streams_and_a_graph
from launch_helpers import Recorder, entries_by_name, resolve_every_problem_to

import cutlass_nm
from cutlass_nm import dispatch
from cutlass_nm.formats.weight import refresh_layouts
from cutlass_nm.ops import clear_layout_cache


class _Launcher:
    """Stands in for a loaded kernel: computes y through the dense weight and counts full and repeated calls."""

    def __init__(self, repeat: bool = True) -> None:
        self.full = self.repeated = 0
        self.repeat = repeat

    def __call__(self, x, w, bias, y) -> None:
        self.full += 1
        y.copy_(x.float() @ w.to_dense().float().T)

    def steady(self, x, w, bias, y):
        if not self.repeat:
            return self
        fixed = w.to_dense().float().T.clone()

        def go(x, w, bias, y) -> None:
            self.repeated += 1
            y.copy_(x.float() @ fixed)

        return go


@pytest.fixture
def launcher(monkeypatch) -> _Launcher:
    return resolve_every_problem_to(monkeypatch, _Launcher())


def _weight() -> cutlass_nm.Sparse24Weight:
    return cutlass_nm.prune(torch.randn(32, 64, dtype=torch.float16), "2:4")[0]


def test_later_calls_run_the_launchers_repeat(launcher):
    w, x = _weight(), torch.randn(3, 64, dtype=torch.float16)
    first = cutlass_nm.matmul(x, w)
    again = cutlass_nm.matmul(x, w)
    assert (launcher.full, launcher.repeated) == (1, 1) and torch.equal(first, again)
    cutlass_nm.matmul(torch.randn(2, 3, 64, dtype=torch.float16), w)  # another shape: full path, then remembered
    cutlass_nm.matmul(torch.randn(2, 3, 64, dtype=torch.float16), w)
    assert (launcher.full, launcher.repeated) == (2, 2)


def test_a_launcher_without_a_repeat_is_called_itself(launcher):
    launcher.repeat = False
    w, x = _weight(), torch.randn(3, 64, dtype=torch.float16)
    cutlass_nm.matmul(x, w)
    cutlass_nm.matmul(x, w)
    assert (launcher.full, launcher.repeated) == (2, 0)


@pytest.mark.parametrize("drop", ["refresh", "clear", "selector"])
def test_layouts_rebuilt_or_dropped_send_the_next_call_down_the_full_path(launcher, drop):
    """A repeat holds the layouts it launches on: after refresh_layouts (a weight changed in place), clear_layout_cache
    or a new selector, the next call resolves again and binds a new repeat (which sees the new values)."""
    w, x = _weight(), torch.randn(3, 64, dtype=torch.float16)
    cutlass_nm.matmul(x, w)
    cutlass_nm.matmul(x, w)
    w.values.mul_(2)
    if drop == "refresh":
        refresh_layouts(w)
    elif drop == "clear":
        clear_layout_cache()
    else:
        dispatch.set_selector(None)
        dispatch._resolve = lambda key: launcher  # set_selector cleared nothing the fixture patched but this
    y = cutlass_nm.matmul(x, w)
    assert (launcher.full, launcher.repeated) == (2, 1)
    assert torch.allclose(y.float(), x.float() @ w.to_dense().float().T, rtol=1e-2, atol=1e-2)
    assert torch.allclose(cutlass_nm.matmul(x, w), y) and launcher.repeated == 2


@pytest.mark.parametrize("workspace", [0, 4096])
def test_sptc24_sm90_repeat_launches_the_first_calls_plan(monkeypatch, workspace):
    """The repeat passes the plan the first call built with only x's and y's addresses; a stream-K problem (it needs
    a workspace, so no plan) is repeated by the launcher itself."""
    import types

    from cutlass_nm.families import KernelTypes
    from cutlass_nm.families.launch import DeviceInfo
    from cutlass_nm.families.sptc24_sm90 import family as fam

    entries_by_name(monkeypatch, fam)
    monkeypatch.setattr(fam, "device_info", lambda dev: DeviceInfo(132, (9, 0), "fake"))
    monkeypatch.setattr(fam, "stream_of", lambda x: 0)
    monkeypatch.setattr("cutlass_nm.families.launch._raw_stream", lambda index: 0)
    lib = types.SimpleNamespace(
        cnm_run=Recorder(0), cnm_workspace_size=Recorder(workspace), cnm_meta_atom_k=lambda: 64,
        cnm_plan_bytes=lambda: 64, cnm_plan=Recorder(0), cnm_launch=Recorder(0))
    launcher = fam._Launcher(lib, fam.Config(), KernelTypes("f16", "f16", False))
    w, x, y = _weight(), torch.randn(3, 64, dtype=torch.float16), torch.empty(3, 32, dtype=torch.float16)
    launcher(x, w, None, y)
    go = launcher.steady(x, w, None, y)
    if workspace:
        assert go is launcher and not lib.cnm_launch.calls
        return
    x2, y2 = torch.randn(3, 64, dtype=torch.float16), torch.empty(3, 32, dtype=torch.float16)
    go(x2, w, None, y2)
    plan = lib.cnm_launch.calls[0][0]
    assert len(lib.cnm_plan.calls) == 1 and lib.cnm_plan.calls[0][0] is plan
    assert lib.cnm_launch.calls == [(plan, x.data_ptr(), y.data_ptr(), 0), (plan, x2.data_ptr(), y2.data_ptr(), 0)]
    assert go.keep[0] is w.values


GPU_CASES = [  # (pattern, vector, m, n, k, family the default path takes there)
    ("2:4", 0, 1, 1000, 1024, "decode24"),
    ("2:4", 0, 96, 512, 1024, "sptc24_sm90"),
    ("128:2:8", 0, 1, 1024, 2048, "nm_decode"),
    ("128:2:8", 0, 96, 512, 1024, "vnm_sm90"),
    ("2:8", 32, 4, 512, 2048, "nm_decode"),
    ("2:8", 8, 1, 520, 1000, "nm_decode_simt"),
    ("2:8", 8, 96, 520, 1000, "nm_simt"),
    ("3:7", 32, 40, 256, 700, "nm_simt"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: f"{c[0]}-v{c[1]}-m{c[2]}-{c[5]}")
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_gpu_repeats_match_the_reference_on_new_inputs(case, with_bias):
    """The default path's repeat (each family that has one) on fresh x every call, 2-D and 3-D, against fp64; after
    the weight's values change in place and its layouts are refreshed, the next calls see the new values."""
    from cutlass_nm.nn import SparseLinear, refresh_module_layouts

    pattern, vector, m, n, k, family = case
    torch.manual_seed(m + n)
    dense = torch.nn.Linear(k, n, bias=with_bias, device="cuda", dtype=torch.float16)
    layer = SparseLinear.from_linear(dense, pattern, **({"vector": vector} if vector else {}))
    for step in range(4):
        if step == 2:
            layer.values.mul_(-0.5)
            refresh_module_layouts(layer)
        ref_w = layer.weight_dense().double()
        for shape in ((m, k), (1, m, k)):
            x = torch.randn(*shape, device="cuda", dtype=torch.float16)
            y = layer(x)
            ref = x.double() @ ref_w.T + (layer.bias.double() if with_bias else 0)
            torch.cuda.synchronize()
            assert torch.isfinite(y).all() and y.shape == (*shape[:-1], n)
            assert ((y.double() - ref).norm() / ref.norm()).item() < 2e-3, (step, shape)
    ran = {r["family"] for r in dispatch.resolved() if (r["m"], r["n"], r["k"], r["pattern"]) == (m, n, k, pattern)}
    assert ran == {family}, ran


@pytest.mark.gpu
@pytest.mark.parametrize("case", [("128:2:8", 96, 512, 1024, "vnm_sm90"), ("2:4", 16, 1024, 4096, "sptc24_sm90"),
                                  ("128:2:8", 13, 512, 1024, "vnm_sm80")], ids=lambda c: c[-1])
def test_gpu_repeats_on_two_streams_and_in_a_graph(case):
    """Repeats issued on two side streams at once each give their own x's result (the V:N:M families' transpose
    scratch is one per stream); a repeat captured in a CUDA graph keeps its own memory: eager calls after the
    capture do not change what the graph replays."""
    pattern, m, n, k, family = case
    torch.manual_seed(n)
    w = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16), pattern)[0]
    ref_w = w.to_dense().double()
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(4)]

    def check(y: torch.Tensor, x: torch.Tensor) -> None:
        ref = x.double() @ ref_w.T
        assert torch.isfinite(y).all() and ((y.double() - ref).norm() / ref.norm()).item() < 2e-3

    for x in xs[:2]:  # the first call plans, the second repeats
        check(cutlass_nm.matmul(x, w, family=family), x)
    repeats_on_two_streams_and_a_graph(lambda x: cutlass_nm.matmul(x, w, family=family), xs, check)


def test_nm_simt_repeat_packs_the_first_calls_arguments(monkeypatch):
    """nm_simt's repeat passes its arguments packed (read here while the call lasts, as the kernel reads them): the
    first call's, with the workspace it used held by the repeat."""
    import ctypes
    import types

    from cutlass_nm.families import KernelTypes
    from cutlass_nm.families.nm_simt import family as fam

    seen = []

    def cnm_launch(address, x, y, stream):
        seen.append((fam.RunArgs.from_buffer_copy(fam.RunArgs.from_address(address)), x, y))
        return 0

    entries_by_name(monkeypatch, fam)
    monkeypatch.setattr(fam, "stream_of", lambda x: 0)
    monkeypatch.setattr("cutlass_nm.families.launch._raw_stream", lambda index: 0)
    lib = types.SimpleNamespace(cnm_run=Recorder(0), cnm_workspace=Recorder(4096), cnm_launch=cnm_launch,
                                cnm_run_args_bytes=lambda: ctypes.sizeof(fam.RunArgs))
    launcher = fam._Launcher(lib, fam.FAMILY.heuristic(_nm_problem()), KernelTypes("f16", "f16", False))
    w = cutlass_nm.prune(torch.randn(64, 96, dtype=torch.float16), "2:8", vector=8)[0]
    x, y = torch.randn(20, 96, dtype=torch.float16), torch.empty(20, 64, dtype=torch.float16)
    launcher(x, w, None, y)
    first = lib.cnm_run.calls[0]
    go = launcher.steady(x, w, None, y)
    go(x, w, None, y)
    packed, x_ptr, y_ptr = seen[0]
    assert (x_ptr, y_ptr) == (x.data_ptr(), y.data_ptr())
    assert (packed.wt, packed.cols, packed.bias, packed.workspace) == (first[1], first[2], first[3], first[5])
    assert (packed.m, packed.n, packed.k, packed.keep, packed.group, packed.vector, packed.kgroups, packed.n_pad,
            packed.nnz_pad, packed.out_kind) == first[6:16]
    assert go.keep[4] is not None and go.keep[4].data_ptr() == packed.workspace


def test_sptc24_sm80_repeat_packs_its_plan_and_its_streams_scratch(monkeypatch):
    """sptc24_sm80's repeat: ``cnm_repeat`` on the packed (plan, the stream's yᵀ scratch), only x, y and the stream per
    call; a call on another stream takes the launcher's own path."""
    import ctypes
    import types

    from cutlass_nm.families.sptc24_sm80 import family as fam

    seen = []

    def cnm_repeat(address, x, y, stream):
        seen.append((fam.RepeatArgs.from_buffer_copy(fam.RepeatArgs.from_address(address)), x, y, stream))
        return 0

    entries_by_name(monkeypatch, fam)
    stream = [3]
    monkeypatch.setattr(fam, "stream_of", lambda x: stream[0])
    monkeypatch.setattr("cutlass_nm.families.launch._raw_stream", lambda index: stream[0])
    workspace = torch.empty(1 << 12, dtype=torch.uint8)
    monkeypatch.setattr(fam, "workspace_buffer", lambda device, nbytes, stream: workspace)
    lib = types.SimpleNamespace(cnm_plan_bytes=lambda: 64, cnm_plan=Recorder(0), cnm_scratch_bytes=lambda n, m: 1024,
                                cnm_run=Recorder(0), cnm_launch=Recorder(0), cnm_repeat=cnm_repeat,
                                cnm_run_args_bytes=lambda: ctypes.sizeof(fam.RepeatArgs))
    launcher = fam._Launcher(lib)
    w = _weight()
    x, y = torch.randn(3, 64, dtype=torch.float16), torch.empty(3, 32, dtype=torch.float16)
    launcher(x, w, None, y)
    plan = lib.cnm_launch.calls[0][0]
    go = launcher.steady(x, w, None, y)
    x2, y2 = torch.randn(1, 3, 64, dtype=torch.float16), torch.empty(1, 3, 32, dtype=torch.float16)
    go(x2, w, None, y2)
    (packed, x_ptr, y_ptr, at), = seen
    assert (packed.plan, packed.scratch, x_ptr, y_ptr, at) == (ctypes.addressof(plan), workspace.data_ptr(),
                                                               x2.data_ptr(), y2.data_ptr(), 3)
    stream[0] = 4
    go(x2, w, None, y2)
    assert len(seen) == 1 and lib.cnm_launch.calls[-1][1:3] == (x2.data_ptr(), y2.data_ptr())


def _nm_problem():
    from cutlass_nm.families import KernelTypes, Problem

    return Problem(20, 64, 96, KernelTypes("f16", "f16", False), "2:8", 8)


def test_workspace_is_one_per_stream_and_grows(monkeypatch):
    """The workspace of a (device, stream) is reused by later calls there, grows for a larger request (at least
    doubling) and is a separate tensor on another stream; at most MAX_WORKSPACES streams keep one."""
    from cutlass_nm.families import launch

    stream = [7]
    monkeypatch.setattr(launch, "_WORKSPACES", {})
    monkeypatch.setattr(launch, "_raw_stream", lambda index: stream[0])
    cpu = torch.device("cpu")
    a = launch.workspace_buffer(cpu, 100)
    assert a.numel() == 1 << 20 and launch.workspace_buffer(cpu, 5000) is a and launch.workspace_buffer(cpu, 0) is None
    stream[0] = 8
    b = launch.workspace_buffer(cpu, 100)
    assert b is not a
    stream[0] = 7
    grown = launch.workspace_buffer(cpu, (1 << 20) + 1)
    assert grown.numel() == 2 << 20 and launch.workspace_buffer(cpu, 10) is grown
    for stream[0] in range(100, 100 + 3 * launch.MAX_WORKSPACES):  # a stream per request: the oldest are dropped
        launch.workspace_buffer(cpu, 100)
    assert len(launch._WORKSPACES) == launch.MAX_WORKSPACES and (cpu, 7) not in launch._WORKSPACES


def test_a_repeat_holding_a_streams_workspace_runs_only_on_that_stream(monkeypatch):
    """``steady_call(..., on=(stream, launcher))`` launches on that stream, x and y as they come (3-D here: only
    their addresses are read), and hands a call on any other stream to the launcher, as 2-D views."""
    from cutlass_nm.families import launch

    stream = [5]
    monkeypatch.setattr(launch, "_raw_stream", lambda index: stream[0])
    fast, slow = Recorder(0), Recorder(None)
    go = launch.steady_call(fast, "plan", (), "fake", (6, 8, 4), on=(5, slow))
    x, y = torch.zeros(2, 3, 4), torch.zeros(2, 3, 8)
    go(x, None, None, y)
    stream[0] = 6
    go(x, None, None, y)
    assert go.any_shape and fast.calls == [("plan", x.data_ptr(), y.data_ptr(), 5)]
    (x2, _, _, y2), = slow.calls
    assert (x2.shape, y2.shape, x2.data_ptr(), y2.data_ptr()) == ((6, 4), (6, 8), x.data_ptr(), y.data_ptr())


def test_a_repeat_holding_a_streams_workspace_leaves_a_capture_on_that_stream_to_the_launcher(monkeypatch):
    """While its own stream captures a CUDA graph, such a repeat hands the call to the launcher (which takes the
    graph's memory for its scratch) instead of baking the stream's eager scratch into the graph."""
    from cutlass_nm.families import launch

    capturing = [False]
    monkeypatch.setattr(launch, "_raw_stream", lambda index: 5)
    monkeypatch.setattr(launch, "_stream_capturing", lambda: capturing[0])
    fast, slow = Recorder(0), Recorder(None)
    go = launch.steady_call(fast, "plan", (), "fake", (6, 8, 4), on=(5, slow))
    x, y = torch.zeros(6, 4), torch.zeros(6, 8)
    go(x, None, None, y)
    capturing[0] = True
    go(x, None, None, y)
    assert fast.calls == [("plan", x.data_ptr(), y.data_ptr(), 5)] and len(slow.calls) == 1


def test_calls_made_while_a_graph_is_captured_are_not_remembered(launcher, monkeypatch):
    """A call captured into a CUDA graph runs the full path and leaves no repeat behind (a repeat built then would
    hold the graph's scratch); the first call after the capture is remembered as usual."""
    w, x = _weight(), torch.randn(3, 64, dtype=torch.float16)
    monkeypatch.setattr(dispatch, "capturing", lambda: True)
    cutlass_nm.matmul(x, w)
    cutlass_nm.matmul(x, w)
    assert (launcher.full, launcher.repeated) == (2, 0)
    monkeypatch.setattr(dispatch, "capturing", lambda: False)
    cutlass_nm.matmul(x, w)
    cutlass_nm.matmul(x, w)
    assert (launcher.full, launcher.repeated) == (3, 1)


def test_a_per_call_scratch_comes_from_the_graph_while_capturing(monkeypatch):
    """``call_scratch``: the stream's workspace (the same tensor call after call), but a tensor of its own for each call
    made while the stream captures a CUDA graph."""
    from cutlass_nm.families import launch

    capturing = [False]
    cpu = torch.device("cpu")
    monkeypatch.setattr(launch, "_raw_stream", lambda index: 11)
    monkeypatch.setattr(launch, "_stream_capturing", lambda: capturing[0])
    monkeypatch.setattr(launch, "_WORKSPACES", {})
    eager = launch.call_scratch(cpu, 256)
    assert launch.call_scratch(cpu, 256) is eager and launch.call_scratch(cpu, 0) is None
    capturing[0] = True
    own = launch.call_scratch(cpu, 256)
    assert own is not eager and own.numel() == 256
    assert list(launch._WORKSPACES) == [(cpu, 11)] and launch._WORKSPACES[(cpu, 11)] is eager  # left as it was

"""The C++ launch of remembered calls (cutlass_nm.fastcall), built against this torch and driven on the CPU by a
ctypes stand-in for a kernel's C entry ``int launch(first, x, y, stream)``."""

from __future__ import annotations

import ctypes
import gc
import weakref

import pytest
import torch
from launch_helpers import resolve_every_problem_to
from torch import nn

import cutlass_nm
from cutlass_nm import dispatch, fastcall
from cutlass_nm.errors import BuildError, LaunchError
from cutlass_nm.families.launch import steady_call
from cutlass_nm.formats.weight import RememberedCalls
from cutlass_nm.nn.linear import module_fast_call

ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


@pytest.fixture(scope="session")
def ext(tmp_path_factory):
    """The extension, built once into a cache that every test worker shares."""
    cache = tmp_path_factory.getbasetemp().parent / "fastcall-cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUTLASS_NM_CACHE", str(cache))
        return fastcall.load(fastcall.build())


@pytest.fixture
def on(ext, monkeypatch):
    """The extension switched on for dispatch (as with a GPU)."""
    monkeypatch.setattr(fastcall, "_state", {"module": ext})
    return ext


class Entry:
    """A kernel's C entry: copies x's bytes into y (a 'kernel' whose output is its input), records each launch."""

    def __init__(self, status: int = 0) -> None:
        self.status, self.calls = status, []
        self.fn = ENTRY(self._launch)

    def _launch(self, first, x, y, stream) -> int:
        self.calls.append((first, x, y, stream))
        if self.status == 0:
            ctypes.memmove(y, x, self.nbytes)
        return self.status


def _call(entry: Entry, x: torch.Tensor, **kwargs):
    first = ctypes.create_string_buffer(16)
    go = steady_call(entry.fn, first, (first,), "standin", (x.shape[0], x.shape[-1], x.shape[-1]))
    entry.nbytes = x.numel() * x.element_size()
    return fastcall.fast_call(go, x, torch.empty_like(x), **kwargs), ctypes.addressof(first)


def test_a_fast_call_checks_x_allocates_y_and_launches_the_entry(on):
    entry = Entry()
    x = torch.randn(3, 8, dtype=torch.float16)
    fast, first = _call(entry, x)
    x2 = torch.randn(3, 8, dtype=torch.float16)
    y = fast(x2)
    assert torch.equal(y, x2) and y.dtype == x2.dtype and y.data_ptr() != x2.data_ptr()
    assert entry.calls == [(first, x2.data_ptr(), y.data_ptr(), None)]  # CPU build: stream 0


@pytest.mark.parametrize("other", ["shape", "dtype", "strided", "misaligned", "subclass"])
def test_what_does_not_fit_the_call_is_left_to_the_python_path(on, other):
    entry = Entry()
    fast, _ = _call(entry, torch.randn(4, 8, dtype=torch.float16))
    x = {"shape": torch.randn(5, 8, dtype=torch.float16),
         "dtype": torch.randn(4, 8, dtype=torch.bfloat16),
         "strided": torch.randn(8, 4, dtype=torch.float16).t(),
         "misaligned": torch.randn(33, dtype=torch.float16)[1:].view(4, 8),
         "subclass": nn.Parameter(torch.randn(4, 8, dtype=torch.float16))}[other]
    assert fast(x) is None and entry.calls == []


@pytest.mark.parametrize(("home", "current", "hits"), [(None, 5, True), (0, 0, True), (0, 5, False), (7, 0, False)],
                         ids=["any", "default-on-default", "default-elsewhere", "other"])
def test_a_call_holding_a_streams_scratch_runs_only_on_that_stream(on, home, current, hits):
    """``steady_call(..., on=(stream, launcher))``: the C++ call launches only on that stream, the default stream
    (handle 0) included, and leaves any other to the Python path (a CPU build's current stream is set here)."""
    on._set_stream(current)
    entry = Entry()
    x = torch.randn(2, 8, dtype=torch.float16)
    first = ctypes.create_string_buffer(16)
    on_arg = None if home is None else (home, lambda *args: None)
    go = steady_call(entry.fn, first, (first,), "standin", (2, 8, 8), on=on_arg)
    entry.nbytes = x.numel() * x.element_size()
    fast = fastcall.fast_call(go, x, torch.empty_like(x))
    try:
        assert (fast(x) is not None) == hits and len(entry.calls) == int(hits)
    finally:
        on._set_stream(0)


def test_guards_end_the_call_when_a_tensor_is_replaced_or_moved(on):
    entry = Entry()
    x = torch.randn(2, 8, dtype=torch.float16)
    holder = {"w": torch.zeros(4), "absent": None}
    fast, _ = _call(entry, x, guards=((holder, "w", holder["w"]), (holder, "gone", None)))
    assert fast(x) is not None
    holder["w"].data = torch.zeros(4)  # same object, new memory
    assert fast(x) is None
    fast, _ = _call(entry, x, guards=((holder, "w", holder["w"]),))
    holder["w"] = torch.zeros(4)  # another object
    assert fast(x) is None
    fast, _ = _call(entry, x, guards=((holder, "gone", None),))
    holder["gone"] = torch.zeros(1)  # None expected: a tensor there ends it
    assert fast(x) is None


def test_a_gradient_to_record_is_left_to_autograd(on):
    entry = Entry()
    x = torch.randn(2, 8, dtype=torch.float16)
    bias = nn.Parameter(torch.zeros(8))
    fast, _ = _call(entry, x, grad_bias=bias)
    assert fast(x) is None  # the bias wants a gradient
    with torch.no_grad():
        assert fast(x) is not None
    bias.requires_grad_(False)
    assert fast(x) is not None
    assert fast(x.clone().requires_grad_()) is None


@pytest.mark.parametrize(("status", "says"), [(1003, "CUDA error 3 launching"), (7, "refused the call (status 7)")])
def test_a_failed_launch_raises_the_launch_error_naming_the_problem(on, status, says):
    fast, _ = _call(Entry(status), torch.randn(2, 8, dtype=torch.float16))
    pattern = r"standin \(m, n, k\) = \(2, 8, 8\): .*" + says.replace("(", ".").replace(")", ".")
    with pytest.raises(LaunchError, match=pattern):
        fast(torch.randn(2, 8, dtype=torch.float16))


def test_the_call_keeps_its_launcher_and_what_it_points_into_alive(on):
    entry = Entry()
    x = torch.randn(2, 8, dtype=torch.float16)
    first = ctypes.create_string_buffer(16)
    go = steady_call(entry.fn, first, (first,), "standin", (2, 8, 8))
    entry.nbytes = x.numel() * x.element_size()
    gone = weakref.ref(go)
    fast = fastcall.fast_call(go, x, torch.empty_like(x))
    del go
    gc.collect()
    assert gone() is not None
    del fast
    gc.collect()
    assert gone() is None


def test_a_kernel_without_a_c_entry_has_no_fast_call(on):
    def plain(x, w, bias, y):
        pass
    assert fastcall.fast_call(plain, torch.zeros(1, 8), torch.zeros(1, 8)) is None


def test_off_means_no_extension(monkeypatch):
    monkeypatch.setattr(fastcall, "_state", {})
    monkeypatch.setenv("CUTLASS_NM_FASTCALL", "off")
    assert fastcall.module() is None and not fastcall.enabled()
    monkeypatch.setenv("CUTLASS_NM_FASTCALL", "on")
    assert fastcall.enabled()


def test_a_failed_build_warns_once_and_is_not_retried(monkeypatch, tmp_path):
    monkeypatch.setenv("CUTLASS_NM_CACHE", str(tmp_path))
    monkeypatch.setenv("CUTLASS_NM_FASTCALL", "on")
    monkeypatch.setattr(fastcall, "_key", lambda: "fastcall-broken")
    monkeypatch.setattr(fastcall, "compile_command", lambda out: ["false"])
    monkeypatch.setattr(fastcall, "_state", {})
    with pytest.warns(RuntimeWarning, match="Python launch path: the C\\+\\+ launch extension failed to build"):
        assert fastcall.module() is None
    assert fastcall.module() is None  # decided for this process
    with pytest.raises(BuildError, match="failed to build before"):  # a new process does not rebuild
        fastcall.build()


class _Launcher:
    """A loaded kernel's stand-in whose repeat is a steady_call over a C entry that copies x into y."""

    def __init__(self) -> None:
        self.entry = Entry()
        self.full = 0

    def __call__(self, x, w, bias, y) -> None:
        self.full += 1
        y.copy_(x)

    def steady(self, x, w, bias, y):
        self.entry.nbytes = x.numel() * x.element_size()
        first = ctypes.create_string_buffer(8)
        return steady_call(self.entry.fn, first, (first,), "standin", (x.shape[0], 64, 64))


@pytest.fixture
def launcher(on, monkeypatch) -> _Launcher:
    return resolve_every_problem_to(monkeypatch, _Launcher())


def _square_weight() -> cutlass_nm.Sparse24Weight:
    return cutlass_nm.prune(torch.randn(64, 64, dtype=torch.float16), "2:4")[0]


def test_matmul_repeats_a_remembered_call_through_its_c_entry(launcher):
    w = _square_weight()
    x = torch.randn(2, 3, 64, dtype=torch.float16)
    cutlass_nm.matmul(x, w)
    x2 = torch.randn(2, 3, 64, dtype=torch.float16)
    y = cutlass_nm.matmul(x2, w)
    assert launcher.full == 1 and len(launcher.entry.calls) == 1 and torch.equal(y, x2) and y.shape == (2, 3, 64)
    strided = torch.randn(2, 64, 3, dtype=torch.float16).transpose(1, 2)  # not contiguous: the full path
    cutlass_nm.matmul(strided, w)
    assert launcher.full == 2 and len(launcher.entry.calls) == 1


def _module() -> cutlass_nm.SparseLinear:
    return cutlass_nm.SparseLinear.from_linear(nn.Linear(64, 64, dtype=torch.float16))


def test_a_module_repeats_its_call_until_its_tensors_or_the_remembered_calls_change(launcher, monkeypatch):
    monkeypatch.setattr("cutlass_nm.nn.linear.direct_call", lambda x, bias: True)
    mod = _module()
    x = torch.randn(3, 64, dtype=torch.float16)
    with torch.no_grad():
        mod(x)
        assert mod.__dict__["_fast"] is not None
        assert torch.equal(mod(x), x) and len(launcher.entry.calls) == 1
        for change in ("bias moved", "calls forgotten", "buffer replaced"):
            if change == "bias moved":
                mod.bias.data = mod.bias.data.clone()
            elif change == "calls forgotten":
                RememberedCalls.forget()
            else:
                mod.values = mod.values.clone()
            full, repeats = launcher.full, len(launcher.entry.calls)
            mod(x)  # not the stale C++ call: matmul's full path, which leaves a new one
            assert (launcher.full, len(launcher.entry.calls)) == (full + 1, repeats), change
            assert torch.equal(mod(x), x) and len(launcher.entry.calls) == repeats + 1, change


def test_a_module_pickles_and_copies_without_its_c_call(launcher, monkeypatch):
    import copy
    import pickle

    monkeypatch.setattr("cutlass_nm.nn.linear.direct_call", lambda x, bias: True)
    mod = _module()
    with torch.no_grad():
        mod(torch.randn(3, 64, dtype=torch.float16))
    assert "_fast" in mod.__dict__
    for clone in (copy.deepcopy(mod), pickle.loads(pickle.dumps(mod))):
        assert "_fast" not in clone.__dict__ and torch.equal(clone.values, mod.values)


def test_module_fast_call_needs_a_remembered_c_entry(on):
    mod = _module()
    x = torch.randn(3, 64, dtype=torch.float16)
    assert module_fast_call(mod, mod.compressed(), x, mod.bias, torch.empty(3, 64, dtype=torch.float16)) is None


GPU_CASES = [  # (pattern, vector, m, n, k): the default path's families that repeat through a C entry
    ("2:4", 0, 1, 1000, 1024),  # decode24
    ("2:4", 0, 96, 512, 1024),  # sptc24_sm90
    ("128:2:8", 0, 1, 1024, 2048),  # nm_decode
    ("2:8", 32, 8, 512, 2048),  # nm_decode
    ("2:8", 8, 1, 520, 1000),  # nm_decode_simt
    ("3:7", 32, 40, 256, 700),  # nm_simt
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: f"{c[0]}-v{c[1]}-m{c[2]}")
def test_gpu_module_calls_from_cpp_follow_new_inputs_streams_graphs_and_a_new_bias(case):
    """A SparseLinear's repeated forward (no grad) takes its C++ call: fresh x each time against fp64, on two side
    streams, captured in a CUDA graph (NaN-poisoned replays), and after its bias moves."""
    from gpu_cases import repeats_on_two_streams_and_a_graph

    pattern, vector, m, n, k = case
    torch.manual_seed(n + m)
    dense = nn.Linear(k, n, device="cuda", dtype=torch.float16)
    layer = cutlass_nm.SparseLinear.from_linear(dense, pattern, **({"vector": vector} if vector else {}))
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(4)]

    def check(y: torch.Tensor, x: torch.Tensor) -> None:
        ref = x.double() @ layer.weight_dense().double().T + layer.bias.double()
        assert torch.isfinite(y).all() and y.shape == (m, n)
        assert ((y.double() - ref).norm() / ref.norm()).item() < 2e-3

    with torch.no_grad():
        for x in xs:
            check(layer(x), x)
        assert layer.__dict__.get("_fast") is not None  # built on this machine and taken
        repeats_on_two_streams_and_a_graph(layer, xs, check)
        layer.bias.data = torch.randn(n, device="cuda", dtype=torch.float16)
        for x in xs:
            check(layer(x), x)


def test_precompiling_kernels_builds_the_extension_beside_them(monkeypatch):
    built = []
    monkeypatch.setattr(fastcall, "module", lambda: built.append(True))
    dispatch.precompile_ids([])
    assert built == [True]


def test_torch_compile_never_calls_a_modules_cpp_call():
    import functools

    mod = _module()
    x = torch.randn(3, 64, dtype=torch.float16)

    def fails(spec, x):
        raise AssertionError("traced into the C++ call")

    mod.__dict__["_fast"] = functools.partial(fails, None)
    try:
        y = torch.compile(mod, fullgraph=True, backend="eager")(x)
    finally:
        torch._dynamo.reset()  # SparseLinear.forward's compiles count against one recompile limit per process
    assert torch.allclose(y.float(), x.float() @ mod.weight_dense().float().T + mod.bias.float(), atol=1e-2)


def test_missing_python_headers_are_named_with_what_to_install(monkeypatch, tmp_path):
    import sysconfig

    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"include": str(tmp_path)})
    with pytest.raises(BuildError, match=r"Python's C headers are missing .*python3-dev"):
        fastcall.compile_command(tmp_path / "lib.so")


def test_status_says_how_eager_calls_launch(monkeypatch, ext):
    monkeypatch.setenv("CUTLASS_NM_FASTCALL", "off")
    assert "Python (CUTLASS_NM_FASTCALL=off)" in fastcall.status()
    monkeypatch.setenv("CUTLASS_NM_FASTCALL", "on")
    monkeypatch.setattr(fastcall, "_state", {"module": None})
    assert "could not be built" in fastcall.status()
    monkeypatch.setattr(fastcall, "_state", {"module": ext})
    assert fastcall.status().startswith("eager calls launch from C++")


def test_a_spec_is_refused_with_what_is_wrong(on):
    x = torch.zeros(2, 8)
    with pytest.raises(ValueError, match="address is 0"):
        on.make(0, 0, x, x, None, "standin", (), None, None)
    with pytest.raises(TypeError, match="x must be a tensor"):
        on.make(1, 0, "x", x, None, "standin", (), None, None)
    with pytest.raises(TypeError, match=r"each guard is \(dict, key, object\)"):
        on.make(1, 0, x, x, None, "standin", (([], "k", None),), None, None)
    with pytest.raises(TypeError, match="grad_bias must be a tensor"):
        on.make(1, 0, x, x, None, "standin", (), 3, None)
    with pytest.raises(TypeError, match="call"):
        on.call(on.make(1, 0, x, x, None, "standin", (), None, None))

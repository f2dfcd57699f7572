"""SparseLinear, sparsify and the custom op, on the CPU (reference path); GPU variants are marked gpu."""

import pytest
import torch
from torch import nn

import cutlass_nm
from cutlass_nm import InputError
from cutlass_nm.nn import SparseLinear, sparsify

H = torch.bfloat16  # 2:4 and V:N:M run fp16/bf16 only: the CPU reference path applies the GPU path's rules


def _mlp(dtype=H):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32, bias=False), nn.ReLU(),
                         nn.Linear(30, 8)).to(dtype)


def test_sparse_linear_matches_masked_dense():
    lin = nn.Linear(64, 48).to(H)
    sl = SparseLinear.from_linear(lin)
    _, mask = cutlass_nm.prune(lin.weight.detach())
    x = torch.randn(5, 3, 64, dtype=H)
    ref = nn.functional.linear(x, lin.weight * mask, lin.bias)
    torch.testing.assert_close(sl(x), ref)


def test_state_dict_is_compressed_and_round_trips():
    sl = SparseLinear.from_linear(nn.Linear(64, 48).to(H))
    sd = sl.state_dict()
    assert set(sd) == {"values", "meta", "bias"}
    assert sd["values"].shape == (48, 32) and sd["meta"].dtype == torch.uint8
    fresh = SparseLinear(64, 48).to(H)  # built in the default dtype, cast afterwards
    fresh.load_state_dict(sd)
    x = torch.randn(4, 64, dtype=H)
    torch.testing.assert_close(fresh(x), sl(x))


def test_sparsify_with_vnm():
    with pytest.warns(UserWarning, match="'4': in_features % 16"):
        model = sparsify(_mlp(), "64:2:8")
    assert isinstance(model[0], SparseLinear) and str(model[0].pattern) == "64:2:8"


def test_sparsify_replaces_selected_layers():
    model = _mlp()
    with pytest.warns(UserWarning, match="1 of 2 nn.Linear"):
        sparsify(model, "2:4", exclude=["2"])
    assert isinstance(model[0], SparseLinear)
    assert type(model[2]) is nn.Linear  # excluded
    assert type(model[4]) is nn.Linear  # in_features 30: skipped
    assert model.sparsify_summary.replaced == ["0"] and model.sparsify_summary.excluded == ["2"]
    assert "in_features % 16" in model.sparsify_summary.skipped["4"]


def test_sparsify_takes_one_include_or_exclude_pattern_as_a_string():
    """A string is one fnmatch pattern (not its characters, which would match every one-letter name)."""
    model = _mlp()
    with pytest.warns(UserWarning, match="1 of 2 nn.Linear"):
        sparsify(model, "2:4", exclude="2")
    assert model.sparsify_summary.replaced == ["0"] and model.sparsify_summary.excluded == ["2"]
    model = _mlp()
    sparsify(model, "2:4", include="2", force=True)
    assert model.sparsify_summary.replaced == ["2"] and type(model[0]) is nn.Linear


def test_opcheck_and_compile_fullgraph_on_cpu():
    sl = SparseLinear.from_linear(nn.Linear(64, 48).to(H))
    x = torch.randn(6, 64, dtype=H)
    torch.library.opcheck(torch.ops.cutlass_nm.sparse24_linear.default, (x, sl.values, sl.meta, sl.bias))
    compiled = torch.compile(sl, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), sl(x))


@pytest.mark.parametrize(("pattern", "fragment"), [
    ("2:128", r"M = 128 > 64: general N:M runs on nm_simt, which takes M <= 64"),
    ("32:2:8", r"V = 32: V:N:M runs at m > 16 tokens on vnm_sm90.*V % 64 == 0")])
def test_patterns_prune_refuses_are_refused_by_the_module_too(pattern, fragment):
    with pytest.raises(cutlass_nm.PatternError, match=fragment):
        SparseLinear(64, 48, pattern=pattern)
    with pytest.raises(cutlass_nm.PatternError, match=fragment):
        sparsify(_mlp(), pattern)


@pytest.mark.parametrize("pattern", ["128:2:8", "64:2:7", "256:2:16"])
def test_vnm_sparse_linear_matches_masked_dense_and_round_trips(pattern):
    torch.manual_seed(1)
    lin = nn.Linear(100, 160).to(H)
    sl = SparseLinear.from_linear(lin, pattern)
    _, mask = cutlass_nm.prune(lin.weight.detach(), pattern)
    x = torch.randn(3, 5, 100, dtype=H)
    torch.testing.assert_close(sl(x), nn.functional.linear(x, lin.weight * mask, lin.bias))
    sd = sl.state_dict()
    assert set(sd) == {"values", "columns", "meta", "bias"}
    fresh = SparseLinear(100, 160, pattern=pattern, dtype=H)
    fresh.load_state_dict(sd)
    torch.testing.assert_close(fresh(x), sl(x))
    torch.library.opcheck(torch.ops.cutlass_nm.vnm_linear.default,
                          (x.reshape(15, 100), sl.values, sl.columns, sl.meta, sl.pattern.v, sl.pattern.m, 100,
                           sl.bias))
    compiled = torch.compile(sl, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), sl(x))


def _assert_gradients_match_dense(sl: SparseLinear, x: torch.Tensor) -> None:
    """Gradients for x and the bias equal those of F.linear over the decompressed weight."""
    sl(x).square().sum().backward()
    x2 = x.detach().clone().requires_grad_(True)
    b2 = sl.bias.detach().clone().requires_grad_(True)
    nn.functional.linear(x2, sl.weight_dense(), b2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(sl.bias.grad, b2.grad)


def test_vnm_gradients_flow_to_inputs_and_bias():
    sl = SparseLinear.from_linear(nn.Linear(64, 128).to(H), "128:2:8")
    _assert_gradients_match_dense(sl, torch.randn(4, 64, dtype=H, requires_grad=True))


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", ["2:4", "128:2:8"])
def test_gpu_compile_and_cuda_graph_match_eager(pattern):
    model = sparsify(nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).half().cuda(), pattern,
                     force=True)
    x = torch.randn(64, 512, device="cuda", dtype=torch.half)
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)(x)
    torch.testing.assert_close(compiled, eager, rtol=2e-3, atol=2e-3)
    static_x = x.clone()
    model(static_x)  # warm: kernels compiled, layouts built, before capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = model(static_x)
    g.replay()
    torch.testing.assert_close(static_y, eager, rtol=2e-3, atol=2e-3)


def test_gradients_flow_to_inputs_and_bias():
    lin = nn.Linear(64, 48).to(H)
    sl = SparseLinear.from_linear(lin)
    x = torch.randn(5, 64, dtype=H, requires_grad=True)
    sl(x).square().sum().backward()
    x2 = x.detach().clone().requires_grad_(True)
    w = sl.weight_dense()
    b = sl.bias.detach().clone().requires_grad_(True)
    nn.functional.linear(x2, w, b).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(sl.bias.grad, b.grad)


def test_safetensors_round_trip_keeps_only_compressed_weights(tmp_path):
    """A sparsified model (SparseLinear 2:4 and 128:2:8, SparseGatedMLP) saves to safetensors without a dense copy
    and loads into a freshly built model that then computes the same outputs."""
    safetensors = pytest.importorskip("safetensors.torch")
    from cutlass_nm.nn import SparseGatedMLP

    torch.manual_seed(3)
    lin = nn.ModuleDict({name: nn.Linear(64, 256, bias=False) for name in ("gate", "up")}).to(H)
    model = nn.ModuleDict({
        "a": SparseLinear.from_linear(nn.Linear(64, 32).to(H), "2:4"),
        "b": SparseLinear.from_linear(nn.Linear(64, 128).to(H), "128:2:8"),
        "mlp": SparseGatedMLP.from_linears(lin["gate"], lin["up"], nn.Linear(256, 64, bias=False).to(H), "128:2:8"),
        "c": SparseLinear.from_linear(nn.Linear(64, 40).to(H), "3:7"),
        "d": SparseLinear.from_linear(nn.Linear(64, 40), "2:8", vector=8),  # fp32: general N:M only
    })
    state = model.state_dict()
    assert not any(name.endswith("weight") for name in state)  # no dense copy
    assert state["c.indices"].dtype == torch.uint8 and state["d.indices"].shape == (5, 16)
    dense_bytes = (32 * 64 + 128 * 64 + 3 * 256 * 64 + 40 * 64) * 2 + 40 * 64 * 4
    assert sum(t.numel() * t.element_size() for t in state.values()) < 0.75 * dense_bytes
    path = tmp_path / "model.safetensors"
    safetensors.save_file(state, str(path))
    fresh = nn.ModuleDict({"a": SparseLinear(64, 32, True, "2:4"), "b": SparseLinear(64, 128, True, "128:2:8"),
                           "mlp": SparseGatedMLP(64, 256, "128:2:8"), "c": SparseLinear(64, 40, True, "3:7"),
                           "d": SparseLinear(64, 40, True, "2:8", vector=8)})
    for name in ("a", "b", "mlp", "c"):
        fresh[name].to(H)
    fresh.load_state_dict(safetensors.load_file(str(path)))
    x = torch.randn(5, 64, dtype=H)
    for name in ("a", "b", "mlp", "c"):
        torch.testing.assert_close(fresh[name](x), model[name](x))
    torch.testing.assert_close(fresh["d"](x.float()), model["d"](x.float()))


@pytest.mark.parametrize(("pattern", "vector", "dtype"), [("3:7", 32, torch.float32), ("2:8", 1, H),
                                                          ("1:4", 8, torch.float16), ("5:64", 128, torch.float32)])
def test_general_nm_sparse_linear_matches_masked_dense_and_round_trips(pattern, vector, dtype):
    torch.manual_seed(4)
    lin = nn.Linear(100, 70).to(dtype)
    sl = SparseLinear.from_linear(lin, pattern, vector=vector)
    _, mask = cutlass_nm.prune(lin.weight.detach(), pattern, vector=vector)
    x = torch.randn(3, 5, 100, dtype=dtype)
    ref = nn.functional.linear(x.double(), (lin.weight * mask).double(), lin.bias.double())
    torch.testing.assert_close(sl(x).double(), ref, rtol=2e-2, atol=2e-2)
    assert torch.equal(sl.weight_dense(), (lin.weight * mask).detach())
    sd = sl.state_dict()
    assert set(sd) == {"values", "indices", "bias"} and sd["indices"].dtype == torch.uint8
    fresh = SparseLinear(100, 70, pattern=pattern, dtype=dtype, vector=vector)
    fresh.load_state_dict(sd)
    torch.testing.assert_close(fresh(x), sl(x))
    p = sl.pattern
    torch.library.opcheck(torch.ops.cutlass_nm.nm_linear.default,
                          (x.reshape(15, 100), sl.values, sl.indices, p.n, p.m, 100, vector, sl.bias))
    torch.testing.assert_close(torch.compile(sl, fullgraph=True, backend="eager")(x), sl(x))
    assert f"pattern={pattern}, vector={vector}" in repr(sl)


def test_general_nm_gradients_flow_to_inputs_and_bias():
    sl = SparseLinear.from_linear(nn.Linear(50, 24), "3:7")
    _assert_gradients_match_dense(sl, torch.randn(4, 50, requires_grad=True))


def test_sparsify_takes_general_nm_on_any_shape_and_warns_nothing():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = sparsify(_mlp(torch.float32), "3:7")
    assert all(isinstance(model[i], SparseLinear) for i in (0, 2, 4))  # 30 -> 8 too: CUDA cores take any shape
    assert model.sparsify_summary.replaced == ["0", "2", "4"] and not model.sparsify_summary.skipped
    x = torch.randn(2, 30)
    torch.testing.assert_close(model[4](x), nn.functional.linear(x, model[4].weight_dense(), model[4].bias))


def test_sparsify_warns_once_with_the_skipped_layers_and_why():
    model = nn.Sequential(nn.Linear(64, 128), nn.Linear(128, 32), nn.Linear(30, 8), nn.Linear(12, 8)).float()
    model[1].weight.data[5, 7] = float("nan")
    model[0].to(H)
    with pytest.warns(UserWarning) as record:
        sparsify(model, "2:4")
    assert len(record) == 1  # one message for every skipped layer
    text = str(record[0].message)
    assert text.startswith("sparsify: 3 of 4 nn.Linear layer(s) left dense (not 2:4)")
    assert "'2', '3': in_features % 16 != 0" not in text  # fp32: the dtype rule comes first
    summary = model.sparsify_summary
    assert summary.replaced == ["0"] and set(summary.skipped) == {"1", "2", "3"}
    assert "which takes the dtypes f16/bf16, got a torch.float32 weight" in summary.skipped["1"]
    assert "'1', '2', '3': 2:4 weights run on sptc24_sm90" in text
    model2 = nn.Sequential(nn.Linear(64, 32), nn.Linear(30, 8)).to(H)
    model2[0].weight.data[5, 7] = float("inf")
    with pytest.warns(UserWarning, match=r"'0': InputError: the weight holds 1 non-finite value\(s\).*row 5, column 7"
                      r".*'1': in_features % 16 != 0"):
        sparsify(model2, "128:2:8")
    assert type(model2[0]) is nn.Linear and model2.sparsify_summary.replaced == []


def test_sparsify_converts_a_bare_linear():
    lin = nn.Linear(64, 32).to(H)
    out = sparsify(lin, "64:2:8")
    assert isinstance(out, SparseLinear) and out.sparsify_summary.replaced == [""]
    x = torch.randn(3, 64, dtype=H)
    torch.testing.assert_close(out(x), nn.functional.linear(x, out.weight_dense(), lin.bias))
    fp32 = nn.Linear(64, 32)
    with pytest.warns(UserWarning, match="1 of 1"):
        same = sparsify(fp32, "2:4")  # cannot run: returned unchanged, with the reason
    assert same is fp32 and "float32" in same.sparsify_summary.skipped[""]


@pytest.mark.parametrize("pattern", ["2:4", "128:2:8", "3:7"])
def test_cpu_op_path_applies_the_gpu_input_rules(pattern):
    """The CPU reference path refuses what matmul refuses on the GPU (all but x's device)."""
    dtype = H if pattern != "3:7" else torch.float16
    sl = SparseLinear.from_linear(nn.Linear(64, 128).to(dtype), pattern)
    other = torch.float16 if dtype == H else torch.bfloat16
    with pytest.raises(cutlass_nm.InputError, match="dtype mismatch"):
        sl(torch.randn(4, 64, dtype=other))
    if pattern != "3:7":
        with pytest.raises(cutlass_nm.InputError, match="float16 or bfloat16 for a"):
            sl(torch.randn(4, 64))
    buf = torch.randn(4 * 64 + 1, dtype=dtype)
    with pytest.raises(cutlass_nm.InputError, match="16-byte aligned"):
        sl(buf[1:].view(4, 64))
    with pytest.raises(cutlass_nm.InputError, match="in_features 64"):
        sl(torch.randn(4, 60, dtype=dtype))
    sl.bias.data = sl.bias.data.float()
    with pytest.raises(cutlass_nm.InputError, match="bias dtype"):
        sl(torch.randn(4, 64, dtype=dtype))
    sl.bias.data = sl.bias.data.to(dtype)
    xt = torch.randn(64, 4, dtype=dtype).T  # any strides: made contiguous on both paths, as nn.Linear takes them
    torch.testing.assert_close(sl(xt), sl(xt.contiguous()))
    assert sl(torch.empty(0, 64, dtype=dtype)).shape == (0, 128)  # m = 0: an empty result


def test_fp32_module_with_24_weight_is_refused_at_forward_not_silently_run():
    sl = SparseLinear(64, 32)  # fp32 buffers: fine to build and cast, but they cannot run
    with pytest.raises(cutlass_nm.InputError, match="float16 or bfloat16 for a Sparse24Weight"):
        sl(torch.randn(2, 64))
    with pytest.raises(cutlass_nm.InputError, match="sptc24_sm90, which takes the dtypes f16/bf16"):
        SparseLinear.from_linear(nn.Linear(64, 32))


@pytest.mark.gpu
@pytest.mark.parametrize(("pattern", "dtype", "vector"), [("3:7", torch.float16, 32), ("3:7", torch.float32, 32),
                                                          ("2:8", torch.bfloat16, 1), ("5:64", torch.float32, 8)])
@pytest.mark.parametrize("m", [1, 5, 16, 17, 203])
def test_gpu_general_nm_sparse_linear_matches_fp64(pattern, dtype, vector, m):
    """SparseLinear with a general N:M weight on the GPU (decode families at m <= 16, nm_simt above): fp64
    reference, tails in n and k, stale NaN in the freed memory the output is allocated from."""
    torch.manual_seed(m)
    lin = nn.Linear(1003, 520).to(device="cuda", dtype=dtype)
    sl = SparseLinear.from_linear(lin, pattern, vector=vector)
    x = torch.randn(m, 1003, device="cuda", dtype=dtype)
    ref = x.double() @ sl.weight_dense().double().T + lin.bias.double()
    poison = torch.full((1 << 22,), float("nan"), device="cuda", dtype=dtype)
    del poison  # the caching allocator hands this NaN-filled block to the op's output
    y = sl(x)
    torch.cuda.synchronize()
    assert y.shape == (m, 520) and y.dtype == dtype and torch.isfinite(y).all()
    err = ((y.double() - ref).norm() / ref.norm()).item()
    assert err < (2e-5 if dtype == torch.float32 else 1e-2), err


def _fake_gpu(monkeypatch, speedups):
    """sparsify's timing replaced: every layer counts as on a GPU and its speedups come from ``speedups``."""
    from cutlass_nm import decisions

    timed = []
    monkeypatch.setattr(decisions, "_measurable", lambda lin: True)
    monkeypatch.setattr(decisions, "_compile", lambda problems, progress: None)
    monkeypatch.setattr(decisions, "measure_speedups",
                        lambda lin, sp, tokens: timed.append((lin.out_features, lin.in_features, tokens))
                        or {m: speedups[(lin.out_features, m)] for m in tokens})
    return timed


def test_sparsify_keeps_dense_where_sparse_is_not_faster(monkeypatch):
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.Linear(64, 128)).to(H)
    timed = _fake_gpu(monkeypatch, {(128, 1): 1.6, (128, 2048): 1.2, (64, 1): 1.5, (64, 2048): 0.9})
    out = sparsify(model, "2:4", tokens=(1, 2048))
    s = out.sparsify_summary
    assert s.replaced == ["0", "3"] and s.kept_dense == ["2"]
    assert type(model[2]) is nn.Linear and isinstance(model[0], SparseLinear) and isinstance(model[3], SparseLinear)
    assert sorted(timed) == [(64, 128, (1, 2048)), (128, 64, (1, 2048))]  # each distinct shape timed once
    assert [(d.name, d.shape, d.decision, d.speedup[2048]) for d in s.decisions] == [
        ("0", (128, 64), "sparse", 1.2), ("2", (64, 128), "dense", 0.9), ("3", (128, 64), "sparse", 1.2)]
    assert "2  64x128  dense  m=1: 1.50x, m=2048: 0.90x  (measured)" in s.table()


def test_sparsify_counts_the_shapes_it_times_on_stderr(monkeypatch, capsys):
    """A line per timed shape (off a terminal) with its speedups; ``progress=False`` prints nothing."""
    _fake_gpu(monkeypatch, {(128, 1): 1.6, (128, 2048): 1.2, (64, 1): 1.5, (64, 2048): 0.9})
    model = nn.Sequential(nn.Linear(64, 128), nn.Linear(128, 64), nn.Linear(64, 128)).to(H)
    sparsify(model, "2:4", tokens=(1, 2048))
    err = capsys.readouterr().err
    assert "sparsify: timing layer shapes [1/2] 128x64: m=1 1.60x, m=2048 1.20x" in err
    assert "sparsify: timing layer shapes [2/2] 64x128: m=1 1.50x, m=2048 0.90x" in err
    sparsify(nn.Sequential(nn.Linear(64, 128)).to(H), "2:4", tokens=(1, 2048), progress=False)
    assert capsys.readouterr().err == ""


def test_sparsify_shows_compiles_only_where_a_kernel_is_not_built(monkeypatch, capsys):
    from types import SimpleNamespace

    from cutlass_nm import decisions
    from cutlass_nm.build import BuildEvent

    calls = []
    monkeypatch.setattr(decisions, "kernels_for", lambda problems: ["a", "b"])

    def fake_precompile(kids, progress=None):
        calls.append(progress is not None)
        if progress is not None:
            for i, kid in enumerate(kids, 1):
                progress(BuildEvent(i, len(kids), kid, SimpleNamespace(built=True), 1.0))

    monkeypatch.setattr(decisions, "precompile_ids", fake_precompile)
    monkeypatch.setattr(decisions, "uncompiled", lambda kids: [])
    decisions._compile([object()], progress=True)
    monkeypatch.setattr(decisions, "uncompiled", lambda kids: kids[:1])
    decisions._compile([object()], progress=True)
    decisions._compile([object()], progress=False)
    assert calls == [False, True, False]
    assert "[2/2]" in capsys.readouterr().err


def test_sparsify_threshold_and_force(monkeypatch):
    _fake_gpu(monkeypatch, {(128, 16): 1.1})
    strict = sparsify(nn.Sequential(nn.Linear(64, 128)).to(H), "2:4", tokens=(16,), min_speedup=1.2)
    assert strict.sparsify_summary.kept_dense == ["0"] and type(strict[0]) is nn.Linear
    forced = sparsify(nn.Sequential(nn.Linear(64, 128)).to(H), "2:4", tokens=(16,), min_speedup=1.2, force=True)
    assert isinstance(forced[0], SparseLinear)
    assert [(d.decision, d.how) for d in forced.sparsify_summary.decisions] == [("sparse", "forced")]
    for bad in ({"tokens": ()}, {"tokens": (0,)}, {"tokens": (1.5,)}, {"min_speedup": 0}):
        with pytest.raises(InputError):
            sparsify(nn.Sequential(nn.Linear(64, 128)).to(H), "2:4", **bad)


def test_sparsify_off_gpu_replaces_untimed():
    s = sparsify(nn.Sequential(nn.Linear(64, 128)).to(H), "2:4").sparsify_summary
    assert s.replaced == ["0"] and s.decisions[0].how.startswith("not measured")


@pytest.mark.gpu
def test_gpu_sparsify_decides_by_measurement():
    """On the GPU: each layer kept sparse measured at least min_speedup at every token count, each kept dense
    did not; the decisions cover every runnable layer."""
    model = nn.Sequential(nn.Linear(4096, 4096), nn.Linear(4096, 512), nn.Linear(512, 4096)).half().cuda()
    s = sparsify(model, "2:4", tokens=(1, 512), min_speedup=1.0).sparsify_summary
    assert len(s.decisions) == 3 and all(d.how == "measured" and set(d.speedup) == {1, 512} for d in s.decisions)
    for d, layer in zip(s.decisions, model, strict=True):
        assert (d.decision == "sparse") == (min(d.speedup.values()) >= 1.0)
        assert isinstance(layer, SparseLinear) == (d.decision == "sparse")


def test_cached_view_is_rebuilt_when_a_buffer_is_replaced():
    sl = SparseLinear.from_linear(nn.Linear(64, 48).to(H))
    first = sl._view()
    assert sl._view() is first  # kept while the buffers are the same tensors
    sl.values = sl.values.clone()  # what .to(), .half() or a reassignment do
    second = sl._view()
    assert second is not first and second.values is sl.values


def test_direct_call_only_for_plain_cuda_tensors_without_gradients():
    from cutlass_nm.nn import direct_call

    assert not direct_call(torch.randn(2, 4))  # CPU: the op's reference path


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", ["2:4", "128:2:8", "2:8"])
def test_gpu_direct_forward_matches_the_custom_op(pattern):
    """Under no_grad the forward launches directly; with gradients it goes through the op: same numbers."""
    sl = SparseLinear.from_linear(nn.Linear(512, 256).half().cuda(), pattern)
    x = torch.randn(3, 7, 512, device="cuda", dtype=torch.half)
    with torch.no_grad():
        direct = sl(x)
        strided = sl(x.transpose(0, 1).contiguous().transpose(0, 1))  # non-contiguous x is made contiguous
    xg = x.clone().requires_grad_(True)
    via_op = sl(xg)
    via_op.float().sum().backward()
    assert xg.grad is not None
    torch.testing.assert_close(direct, via_op.detach(), rtol=0, atol=0)
    torch.testing.assert_close(strided, direct, rtol=0, atol=0)


def test_precompile_model_has_nothing_to_compile_off_the_gpu(monkeypatch):
    import cutlass_nm.kernels as kernels

    monkeypatch.setattr(kernels, "precompile", lambda kids, **kw: pytest.fail(f"compiled {kids}"))
    model = sparsify(_mlp(), "2:4", force=True)
    assert cutlass_nm.precompile_model(model, (1, 2048)) == 0


@pytest.mark.gpu
def test_gpu_precompile_model_leaves_nothing_to_compile_on_first_calls(monkeypatch):
    """After ``precompile_model`` at some token counts, forwards at those counts only load kernels."""
    from cutlass_nm import kernels
    from cutlass_nm.nn import SparseGatedMLP

    torch.manual_seed(0)
    lin = [nn.Linear(256, 512, bias=False).half().cuda() for _ in range(3)]
    mlp = SparseGatedMLP.from_linears(lin[0], lin[1], nn.Linear(512, 256, bias=False).half().cuda())
    model = nn.Sequential(SparseLinear.from_linear(nn.Linear(256, 256).half().cuda(), "2:4"), mlp,
                          _gated_24(2, device="cuda"))
    tokens = (1, 48)
    assert cutlass_nm.precompile_model(model, tokens) >= 4  # 2:4 decode + GEMM, fused gate/up + down, decode
    built, build = [], kernels.build

    def guarded(source, arch, name="kernel", **kw):
        if not kernels.is_cached(source, arch):
            built.append(name)
        return build(source, arch, name, **kw)

    monkeypatch.setattr(kernels, "build", guarded)
    with torch.no_grad():
        for m in tokens:
            y = model(torch.randn(m, 256, device="cuda", dtype=torch.half))
            assert y.shape == (m, 256) and torch.isfinite(y).all()
    assert not built


def test_kernel_layouts_are_freed_with_their_module():
    """Layouts cached for a module's weight (keyed by its metadata storage) go when the module goes: a freed model
    leaves no GPU memory behind. The decode path's in-place 2:4 layout aliases the weight without pinning it."""
    import gc

    from cutlass_nm import ops
    from cutlass_nm.families.decode24.family import in_place_layout

    layer = SparseLinear.from_linear(nn.Linear(64, 32).half())
    w = layer._view()
    layout = w.layout(("in_place",), in_place_layout)
    assert layout[1].data_ptr() == layer.meta.data_ptr() and layout[1] is not layer.meta
    assert layer._view().layout(("in_place",), lambda _: pytest.fail("rebuilt")) is layout  # one cache per weight
    key = (layer.meta.untyped_storage().data_ptr(), 0, tuple(layer.meta.shape))
    assert key in ops._LAYOUTS
    del layer, w, layout
    gc.collect()
    assert key not in ops._LAYOUTS


@pytest.mark.parametrize("kind", ["linear", "stacked", "gated_vnm"])
def test_a_device_move_or_cast_frees_the_old_tensors(kind):
    """``.to()`` / ``.cpu()`` / ``.half()`` drop a module's cached views, layouts and C++ launch with the tensors
    they hold: the old copy is freed at once (a model moved off the GPU kept its GPU weights alive before), and the
    module still computes its weight after the move."""
    import gc
    import weakref

    from cutlass_nm.nn import SparseGatedMLP

    torch.manual_seed(0)
    if kind == "gated_vnm":
        lins = [nn.Linear(64, 256, bias=False), nn.Linear(64, 256, bias=False), nn.Linear(256, 64, bias=False)]
        mod = SparseGatedMLP.from_linears(*(lin.half() for lin in lins))
        old, views = mod.gate_up_values, [mod._gate_up_view(), mod.down_proj._view()]
    else:
        mod = _gated_24(0).gate_up if kind == "stacked" else SparseLinear.from_linear(nn.Linear(64, 32).half())
        old, views = mod.values, [mod._view()]
        if kind == "stacked":
            views.append(mod.parts())
    before = mod.weight_dense() if kind != "gated_vnm" else mod.dense_weights()[0]
    gone = weakref.ref(old)
    del old, views
    mod.float()
    gc.collect()
    assert gone() is None, "the module's cached views kept its old tensors alive"
    after = mod.weight_dense() if kind != "gated_vnm" else mod.dense_weights()[0]
    assert after.dtype == torch.float32 and torch.equal(after, before.float())


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", ["2:4", "128:2:8"])
def test_gpu_moving_a_model_that_ran_off_the_gpu_frees_its_memory(pattern):
    """A model that ran on the GPU (kernel layouts built at a decode and a GEMM row count) and then moved to the CPU
    holds no GPU memory; back on the GPU it computes what it computed before."""
    import gc

    torch.manual_seed(0)
    gc.collect()
    base = torch.cuda.memory_allocated()
    model = sparsify(nn.Sequential(nn.Linear(1024, 2048, bias=False), nn.Linear(2048, 1024, bias=False)).half()
                     .cuda(), pattern, force=True)
    xs = [torch.randn(m, 1024, device="cuda", dtype=torch.half) for m in (1, 64)]
    with torch.no_grad():
        before = [model(x) for x in xs]
    model.cpu()
    gc.collect()
    assert torch.cuda.memory_allocated() - base < 1 << 20, "the moved model's GPU tensors are still allocated"
    model.cuda()
    with torch.no_grad():
        for x, y in zip(xs, before, strict=True):
            torch.testing.assert_close(model(x), y, rtol=0, atol=0)


@pytest.mark.parametrize("pattern", ["2:4", "128:2:8", "2:8"])
@pytest.mark.parametrize("how", ["cast", "reassign"])
def test_layouts_follow_values_replaced_under_the_same_metadata(pattern, how):
    """A cast to another dtype (``.half()``) or a new values tensor leaves the metadata tensor as it was: layouts
    built from the old values (a kernel would read their bits in the new dtype, or stale weights) are not reused."""
    mod = SparseLinear.from_linear(nn.Linear(256, 128).bfloat16(), pattern)
    old = mod._view().layout(("probe",), lambda w: w.values)
    if how == "cast":
        mod.half()
    else:
        mod.values = torch.randn_like(mod.values)
    new = mod._view().layout(("probe",), lambda w: w.values)
    assert new is not old and new.data_ptr() == mod.values.data_ptr() and new.dtype == mod.values.dtype


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", ["2:4", "128:2:8"])
def test_gpu_a_module_cast_after_running_computes_its_new_weights(pattern):
    """Run in bf16 at a decode and a GEMM row count (layouts built from bf16 values), cast to fp16, run again: the
    outputs match the fp16 weight's reference, not kernels reading the old bf16 layouts."""
    torch.manual_seed(0)
    model = sparsify(nn.Sequential(nn.Linear(1024, 512, bias=False)).bfloat16().cuda(), pattern, force=True)
    xs = [torch.randn(m, 1024, device="cuda") for m in (1, 64)]
    with torch.no_grad():
        for x in xs:
            model(x.bfloat16())
        model.half()
        w = model[0].weight_dense().double()
        for x in xs:
            y = model(x.half())
            ref = x.half().double() @ w.T
            assert y.dtype == torch.float16
            assert ((y.double() - ref).norm() / ref.norm()).item() < 2e-3


@pytest.mark.parametrize("cast", ["half", "bfloat16", "to_dtype"])
def test_fp8_module_keeps_its_float32_scales_through_a_cast(cast):
    """``model.half()`` / ``.to(dtype)`` casts an FP8 module's bias (its output dtype) but not its per-channel
    scales: they stay float32, bit for bit, and the module still computes its weight."""
    mod = SparseLinear.from_linear(nn.Linear(256, 128).bfloat16(), "2:4", fp8=True)
    scale, dense = mod.scale.clone(), mod.weight_dense().float()
    mod = mod.to(torch.float16) if cast == "to_dtype" else getattr(mod, cast)()
    assert mod.scale.dtype == torch.float32 and torch.equal(mod.scale, scale)
    assert torch.equal(mod.weight_dense().float(), dense)


def test_gated_mlp_cast_rebuilds_its_gate_up_layouts():
    from cutlass_nm.nn import SparseGatedMLP

    lins = [nn.Linear(64, 256, bias=False), nn.Linear(64, 256, bias=False), nn.Linear(256, 64, bias=False)]
    mod = SparseGatedMLP.from_linears(*(lin.bfloat16() for lin in lins))
    old = mod._gate_up_view().layout(("probe",), lambda w: w.values)
    mod.half()
    new = mod._gate_up_view().layout(("probe",), lambda w: w.values)
    assert new is not old and new.dtype == torch.float16 and new.data_ptr() == mod.gate_up_values.data_ptr()


def test_loading_weights_rebuilds_built_layouts_in_place():
    """A module that already ran has kernel layouts of its old weight: load_state_dict rebuilds them from the new
    one into the same tensors (launch plans and captured graphs keep their addresses), for 2:4 and V:N:M."""
    from cutlass_nm.families.vnm_sm90.family import kernel_layout

    torch.manual_seed(0)
    for pattern, build in (("2:4", lambda w: (w.meta.clone(), 4)), ("128:2:8", lambda w: kernel_layout(w, 64))):
        old, new = (SparseLinear.from_linear(nn.Linear(256, 128).half(), pattern) for _ in range(2))
        assert not torch.equal(old.values, new.values)
        layout = old._view().layout(("test",), build)
        before = [t.data_ptr() for t in layout if isinstance(t, torch.Tensor)]
        old.load_state_dict(new.state_dict())
        again = old._view().layout(("test",), lambda _: pytest.fail("rebuilt instead of refreshed"))
        want = build(new._view())
        assert again is layout and [t.data_ptr() for t in again if isinstance(t, torch.Tensor)] == before
        same = (torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(again, want, strict=True))
        assert all(same)


def test_clearing_the_layout_cache_reaches_views_already_made():
    from cutlass_nm.ops import clear_layout_cache

    layer = SparseLinear.from_linear(nn.Linear(64, 32).half())
    w = layer._view()
    w.layout(("test",), lambda w: 1)
    clear_layout_cache()
    assert not w.has_layout(("test",)) and layer._view().layout(("test",), lambda w: 2) == 2


def test_a_module_that_ran_still_pickles():
    """Cached layouts keep their builders (for refresh_layouts); pickling a weight or module drops the builders."""
    import io

    layer = SparseLinear.from_linear(nn.Linear(64, 32).half())
    layer._view().layout(("test",), lambda w: w.meta.clone())  # a lambda, as launchers pass
    buf = io.BytesIO()
    torch.save(layer, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=False)
    assert torch.equal(back.meta, layer.meta)


def _gated_24(seed: int, dim: int = 256, hidden: int = 384, device: str = "cpu", fp8: bool = False):
    from cutlass_nm.nn import Sparse24GatedMLP

    torch.manual_seed(seed)
    lins = [nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False), nn.Linear(hidden, dim, bias=False)]
    return Sparse24GatedMLP.from_linears(*(lin.half().to(device) for lin in lins), fp8=fp8)


@pytest.mark.parametrize("fp8", [False, True])
def test_stacked_parts_are_the_layers_and_follow_a_load(fp8):
    """A stack's parts (the GEMMs a long x runs, one a layer) are each layer's rows over the stacked buffers (FP8:
    with their scales), each with its own layout cache; built once, and still the layers after ``load_state_dict``
    of other values."""
    mlp = _gated_24(0, fp8=fp8)
    parts = mlp.gate_up.parts()
    assert mlp.gate_up.parts() is parts and mlp.gate_up._view() is mlp.gate_up._view()  # two caches, no eviction
    assert parts[0]._layouts is not parts[1]._layouts
    assert parts[1].values.data_ptr() > parts[0].values.data_ptr() == mlp.gate_up.values.data_ptr()  # views
    mlp.load_state_dict(_gated_24(1, fp8=fp8).state_dict())
    gate, up, _ = mlp.dense_weights()
    parts = mlp.gate_up.parts()
    assert torch.equal(parts[0].to_dense().to(gate.dtype), gate) and torch.equal(parts[1].to_dense().to(up.dtype), up)


def test_stacked_part_takes_its_output_of_one_split_per_input(monkeypatch):
    """Parts taken of one x share one split (one kernel); a part taken again, a new x or an x changed in place
    splits again; the pending outputs go once every part was taken."""
    from cutlass_nm.nn import StackedPart, StackedSparseLinear

    torch.manual_seed(0)
    lins = [SparseLinear.from_linear(nn.Linear(64, n, bias=False).half(), "2:4") for n in (128, 64, 32)]
    stack = StackedSparseLinear.stack(lins)
    q, k, v = (StackedPart(stack, i) for i in range(3))
    splits = []
    split = stack.split
    monkeypatch.setattr(stack, "split", lambda x: splits.append(1) or split(x))
    x = torch.randn(3, 64).half()
    with torch.no_grad():
        want = [lin(x) for lin in lins]
        got = [q(x), k(x), v(x)]
        assert len(splits) == 1 and stack._pending is None
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        q(x), q(x)  # q again before k and v: a new split
        assert len(splits) == 3
        x.mul_(2)  # changed in place: k splits again and sees it
        assert torch.equal(k(x), lins[1](x)) and len(splits) == 4
    with torch.inference_mode():  # no version counter there: one split for the three parts all the same
        x = torch.randn(3, 64).half()
        assert all(torch.equal(p(x), lin(x)) for p, lin in zip((q, k, v), lins, strict=True)) and len(splits) == 5
@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 16, 17, 300])
def test_gpu_sparse24_gated_mlp_matches_fp64_fused_and_split(rows):
    """One stacked kernel up to FUSED_ROWS rows, two GEMMs above; both match fp64, also after a weight reload (the
    parts' layouts are rebuilt); NaN-poisoned allocations catch unwritten outputs."""
    import torch.nn.functional as F

    mlp = _gated_24(rows, device="cuda")
    x = torch.randn(rows, 256, device="cuda", dtype=torch.half)
    for reload in (False, True):
        if reload:
            mlp.load_state_dict(_gated_24(rows + 100, device="cuda").state_dict())
        torch.empty(1 << 22, device="cuda", dtype=torch.half).fill_(float("nan"))  # poison the next allocations
        gate, up, down = (w.double() for w in mlp.dense_weights())
        ref = (F.silu(x.double() @ gate.T) * (x.double() @ up.T)) @ down.T
        with torch.no_grad():
            y = mlp(x)
        assert torch.isfinite(y).all()
        assert ((y.double() - ref).norm() / ref.norm()).item() < 3e-3


@pytest.mark.parametrize("pattern, sizes", [("128:2:8", (256, 128, 96)), ("2:8", (64, 32, 40))])
def test_stacked_vnm_and_nm_parts_are_their_layers(pattern, sizes):
    """V:N:M and N:M layers stack by whole blocks of rows: each part is its layer's weight exactly (its block of
    columns or indices included) and each split output its layer's; a layer that leaves a block part-filled before
    another is refused, naming the rule."""
    from cutlass_nm.nn import StackedSparseLinear

    torch.manual_seed(0)
    lins = [SparseLinear.from_linear(nn.Linear(200, n, bias=True).half(), pattern) for n in sizes]
    stack = StackedSparseLinear.stack(lins)
    assert stack.sizes == sizes and stack.pattern == lins[0].pattern
    for part, lin in zip(stack.parts(), lins, strict=True):
        assert torch.equal(part.to_dense(), lin.weight_dense())
    x = torch.randn(5, 200).half()
    with torch.no_grad():
        for got, lin in zip(stack.split(x), lins, strict=True):
            want = lin(x)
            assert ((got.float() - want.float()).norm() / want.float().norm()).item() < 1e-3
    with pytest.raises(cutlass_nm.PatternError, match="out_features % 32 == 0"):
        StackedSparseLinear.stack([SparseLinear.from_linear(nn.Linear(200, n).half(), "2:8") for n in (48, 32)])


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", ["2:4", "128:2:8", "2:8"])
@pytest.mark.parametrize("rows", [1, 16, 17, 300])
def test_gpu_stacked_parts_match_fp64(pattern, rows):
    """A q/k/v-shaped stack (biased) at each pattern: one kernel up to FUSED_ROWS rows, one GEMM a part above;
    every part's output matches fp64 of its layer; NaN-poisoned allocations catch unwritten outputs."""
    from cutlass_nm.nn import StackedSparseLinear

    torch.manual_seed(rows)
    lins = [SparseLinear.from_linear(nn.Linear(512, n, device="cuda").half(), pattern) for n in (512, 256, 256)]
    stack = StackedSparseLinear.stack(lins)
    x = torch.randn(rows, 512, device="cuda", dtype=torch.half)
    torch.empty(1 << 22, device="cuda", dtype=torch.half).fill_(float("nan"))  # poison the next allocations
    with torch.no_grad():
        outs = stack.split(x)
    for got, lin in zip(outs, lins, strict=True):
        ref = x.double() @ lin.weight_dense().double().T + lin.bias.double()
        assert got.shape == ref.shape and torch.isfinite(got).all()
        assert ((got.double() - ref).norm() / ref.norm()).item() < 3e-3


def test_stack_sparse_linears_only_where_the_layers_stack():
    """Layers of one input, 2:4, biased alike and FP8 alike become one stack (summed rows, the parts under their
    names); anything else is left as it was (None)."""
    from cutlass_nm.nn import StackedPart, StackedSparseLinear, stack_sparse_linears

    def attn(q, k, v):
        return nn.ModuleDict({"q_proj": q, "k_proj": k, "v_proj": v})

    def lin(n, k=64, bias=False, pattern="2:4", fp8=False):
        return SparseLinear.from_linear(nn.Linear(k, n, bias=bias).half(), pattern, fp8=fp8)

    ok = attn(lin(128, bias=True), lin(64, bias=True), lin(16, bias=True))
    stack = stack_sparse_linears(ok, ("q_proj", "k_proj", "v_proj"), "qkv_proj")
    assert isinstance(stack, StackedSparseLinear) and ok["qkv_proj"] is stack and stack.sizes == (128, 64, 16)
    assert isinstance(ok["v_proj"], StackedPart) and stack.bias is not None
    assert torch.equal(stack.parts()[1].to_dense(), ok["k_proj"].weight_dense())  # a 64-row block of the stack
    refused = [attn(lin(128), lin(64, bias=True), lin(64)), attn(lin(128), lin(64, k=128), lin(64)),
               attn(lin(32, pattern="128:2:8"), lin(128, pattern="128:2:8"), lin(128, pattern="128:2:8")),
               attn(lin(128), lin(64, fp8=True), lin(64)), attn(lin(128), nn.Linear(64, 64).half(), lin(64)),
               attn(lin(128), lin(32), lin(64))]  # 2:4 metadata holds rows in blocks of 64
    with pytest.raises(cutlass_nm.PatternError, match="at least one layer"):
        StackedSparseLinear.stack([])
    with pytest.raises(cutlass_nm.PatternError, match=r"2:4 stack holds its metadata by blocks of 64 rows"):
        StackedSparseLinear.stack([lin(128), lin(32), lin(64)])
    for mod in refused:
        before = dict(mod.items())
        assert stack_sparse_linears(mod, ("q_proj", "k_proj", "v_proj"), "qkv_proj") is None
        assert dict(mod.items()) == before


def test_module_builders_refuse_what_they_cannot_take():
    from cutlass_nm.nn import StackedSparseLinear, sparsify_gated_mlps

    with pytest.raises(InputError, match=r"sparsify_gated_mlps takes an nn\.Module, got int"):
        sparsify_gated_mlps(5, "128:2:8")
    with pytest.raises(cutlass_nm.PatternError, match="takes 2:4 or 128:2:M patterns, got 2:8"):
        sparsify_gated_mlps(nn.Sequential(), "2:8")
    with pytest.raises(InputError, match=r"takes SparseLinear layers, got \['int'\]"):
        StackedSparseLinear.stack([5])
    with pytest.raises(InputError, match=r"float16, bfloat16 or float32 \(FP8: fp8=True\), got torch\.int32"):
        SparseLinear(64, 32, pattern="2:4", dtype=torch.int32)
    with pytest.raises(InputError, match=r"from_linear takes an nn\.Linear, got int"):
        SparseLinear.from_linear(5, "2:4")


def test_modules_refuse_what_they_cannot_take():
    """A non-tensor input, a non-positive size, and precompile_model's model and token counts get one clear error
    each (no AttributeError from deep inside)."""
    lin = sparsify(nn.Linear(128, 64).to(H), "2:4", force=True)
    with pytest.raises(InputError, match="SparseLinear takes a tensor, got NoneType"):
        lin(None)
    with pytest.raises(cutlass_nm.ShapeError, match="in_features and out_features >= 1, got -1 and 64"):
        SparseLinear(-1, 64, pattern="2:4")
    with pytest.raises(InputError, match=r"precompile_model takes an nn\.Module, got int"):
        cutlass_nm.precompile_model(3, tokens=(1,))
    for tokens in ((), (0,), (1.5,)):
        with pytest.raises(InputError, match="tokens must be positive ints"):
            cutlass_nm.precompile_model(lin, tokens=tokens)


@pytest.mark.parametrize("pattern", ["2:4", "128:2:8", "2:8"])
def test_load_state_dict_refuses_positions_off_the_pattern(pattern):
    """A state dict whose meta (2:4, V:N:M) or indices (N:M) break the pattern raises and leaves the module as it
    was; the module's own state dict loads back."""
    lin = sparsify(nn.Linear(128, 128).to(H), pattern, force=True)
    good = {k: v.clone() for k, v in lin.state_dict().items()}
    key = "indices" if "indices" in good else "meta"
    bad = {**good, key: torch.full_like(good[key], 0 if key == "indices" else 0b0001)}
    before = lin.weight_dense().clone()
    with pytest.raises(RuntimeError, match="not ascending"):
        lin.load_state_dict(bad)
    assert torch.equal(lin.weight_dense(), before)
    lin.load_state_dict(good)
    assert torch.equal(lin.weight_dense(), before)


def test_gated_mlp_load_state_dict_refuses_gate_up_positions_off_the_pattern():
    from cutlass_nm.nn import SparseGatedMLP

    lins = [nn.Linear(256, 256, bias=False).to(H) for _ in range(3)]
    mlp = SparseGatedMLP.from_linears(*lins, pattern="128:2:8")
    good = {k: v.clone() for k, v in mlp.state_dict().items()}
    with pytest.raises(RuntimeError, match="fused gate/up weight's positions"):
        mlp.load_state_dict({**good, "gate_up_columns": torch.zeros_like(good["gate_up_columns"])})
    mlp.load_state_dict(good)


def test_a_state_dict_with_per_group_metadata_loads_packed():
    """A 2:4 state dict of an earlier version (meta as per-group nibbles, out x in/4) loads into the packed module
    as the same weight, a stack's too; nibbles that break the pattern are refused with the module left as it was."""
    import copy

    from cutlass_nm.nn import StackedSparseLinear

    torch.manual_seed(0)
    for src in (SparseLinear.from_linear(nn.Linear(128, 96).half(), "2:4"),
                StackedSparseLinear.stack([SparseLinear.from_linear(nn.Linear(128, n).half(), "2:4")
                                           for n in (64, 40)])):
        old = dict(src.state_dict())
        old["meta"] = src.compressed().groups()
        assert old["meta"].shape == (src.out_features, 32)
        dst = copy.deepcopy(src)
        dst.meta.fill_(0x44)
        dst.load_state_dict(old)
        assert torch.equal(dst.meta, src.meta) and torch.equal(dst.weight_dense(), src.weight_dense())
        bad = {**old, "meta": old["meta"] | 0x10}
        with pytest.raises(RuntimeError, match="not ascending"):
            dst.load_state_dict(bad)
        assert torch.equal(dst.meta, src.meta)

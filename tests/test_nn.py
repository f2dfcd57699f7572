"""SparseLinear, sparsify and the custom op, on the CPU (reference path); GPU variants are marked gpu."""

import pytest
import torch
from torch import nn

import cutlass_nm
from cutlass_nm.nn import SparseLinear, sparsify


def _mlp(dtype=torch.float32):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32, bias=False), nn.ReLU(),
                         nn.Linear(30, 8)).to(dtype)


def test_sparse_linear_matches_masked_dense():
    lin = nn.Linear(64, 48)
    sl = SparseLinear.from_linear(lin)
    _, mask = cutlass_nm.prune(lin.weight.detach())
    x = torch.randn(5, 3, 64)
    ref = nn.functional.linear(x, lin.weight * mask, lin.bias)
    torch.testing.assert_close(sl(x), ref)


def test_state_dict_is_compressed_and_round_trips():
    sl = SparseLinear.from_linear(nn.Linear(64, 48))
    sd = sl.state_dict()
    assert set(sd) == {"values", "meta", "bias"}
    assert sd["values"].shape == (48, 32) and sd["meta"].dtype == torch.uint8
    fresh = SparseLinear(64, 48)
    fresh.load_state_dict(sd)
    x = torch.randn(4, 64)
    torch.testing.assert_close(fresh(x), sl(x))


def test_sparsify_with_vnm():
    model = sparsify(_mlp(), "64:2:8")
    assert isinstance(model[0], SparseLinear) and str(model[0].pattern) == "64:2:8"


def test_sparsify_replaces_selected_layers():
    model = _mlp()
    sparsify(model, "2:4", exclude=["2"])
    assert isinstance(model[0], SparseLinear)
    assert type(model[2]) is nn.Linear  # excluded
    assert type(model[4]) is nn.Linear  # in_features 30: skipped


def test_opcheck_and_compile_fullgraph_on_cpu():
    sl = SparseLinear.from_linear(nn.Linear(64, 48))
    x = torch.randn(6, 64)
    torch.library.opcheck(torch.ops.cutlass_nm.sparse24_linear.default, (x, sl.values, sl.meta, sl.bias))
    compiled = torch.compile(sl, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), sl(x))


def test_only_24_and_vnm_patterns():
    with pytest.raises(cutlass_nm.PatternError, match="128:2:8"):
        SparseLinear(64, 48, pattern="2:8")


@pytest.mark.parametrize("pattern", ["128:2:8", "64:2:7", "32:2:16"])
def test_vnm_sparse_linear_matches_masked_dense_and_round_trips(pattern):
    torch.manual_seed(1)
    lin = nn.Linear(100, 160)
    sl = SparseLinear.from_linear(lin, pattern)
    _, mask = cutlass_nm.prune(lin.weight.detach(), pattern)
    x = torch.randn(3, 5, 100)
    torch.testing.assert_close(sl(x), nn.functional.linear(x, lin.weight * mask, lin.bias))
    sd = sl.state_dict()
    assert set(sd) == {"values", "columns", "meta", "bias"}
    fresh = SparseLinear(100, 160, pattern=pattern)
    fresh.load_state_dict(sd)
    torch.testing.assert_close(fresh(x), sl(x))
    torch.library.opcheck(torch.ops.cutlass_nm.vnm_linear.default,
                          (x.reshape(15, 100), sl.values, sl.columns, sl.meta, sl.pattern.v, sl.pattern.m, 100,
                           sl.bias))
    compiled = torch.compile(sl, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), sl(x))


def test_vnm_gradients_flow_to_inputs_and_bias():
    lin = nn.Linear(64, 128)
    sl = SparseLinear.from_linear(lin, "128:2:8")
    x = torch.randn(4, 64, requires_grad=True)
    sl(x).square().sum().backward()
    x2 = x.detach().clone().requires_grad_(True)
    b2 = sl.bias.detach().clone().requires_grad_(True)
    nn.functional.linear(x2, sl.weight_dense(), b2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(sl.bias.grad, b2.grad)


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", ["2:4", "128:2:8"])
def test_gpu_compile_and_cuda_graph_match_eager(pattern):
    model = sparsify(nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).half().cuda(), pattern)
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
    lin = nn.Linear(64, 48)
    sl = SparseLinear.from_linear(lin)
    x = torch.randn(5, 64, requires_grad=True)
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
    lin = nn.ModuleDict({name: nn.Linear(64, 256, bias=False) for name in ("gate", "up")})
    model = nn.ModuleDict({
        "a": SparseLinear.from_linear(nn.Linear(64, 32), "2:4"),
        "b": SparseLinear.from_linear(nn.Linear(64, 128), "128:2:8"),
        "mlp": SparseGatedMLP.from_linears(lin["gate"], lin["up"], nn.Linear(256, 64, bias=False), "128:2:8"),
    })
    state = model.state_dict()
    assert not any(name.endswith("weight") for name in state)  # no dense copy
    dense_bytes = (32 * 64 + 128 * 64 + 3 * 256 * 64) * 4
    assert sum(t.numel() * t.element_size() for t in state.values()) < 0.75 * dense_bytes
    path = tmp_path / "model.safetensors"
    safetensors.save_file(state, str(path))
    fresh = nn.ModuleDict({"a": SparseLinear(64, 32, True, "2:4"), "b": SparseLinear(64, 128, True, "128:2:8"),
                           "mlp": SparseGatedMLP(64, 256, "128:2:8")})
    fresh.load_state_dict(safetensors.load_file(str(path)))
    x = torch.randn(5, 64)
    for name in ("a", "b", "mlp"):
        torch.testing.assert_close(fresh[name](x), model[name](x))

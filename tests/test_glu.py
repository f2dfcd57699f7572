"""Gate/up fusion without a GPU: the fused format, the vnm_glu_sm90 family's rules and source, SparseGatedMLP."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from cutlass_nm import ConfigError, InputError, PatternError, ShapeError
from cutlass_nm.families import KernelTypes, Problem, get_family
from cutlass_nm.formats.glu import deinterleave, fuse_glu, interleave, kept_fractions, split_glu
from cutlass_nm.formats.vnm import compress_vnm, validate_vnm
from cutlass_nm.nn import SparseGatedMLP, SparseLinear, sparsify_gated_mlps

GLU = get_family("vnm_glu_sm90")
F16 = KernelTypes("f16", "f16", False)


@settings(max_examples=15, deadline=None)
@given(blocks=st.integers(1, 3), k=st.integers(8, 80), m=st.sampled_from([7, 8, 10, 16]), seed=st.integers(0, 99))
def test_fused_halves_are_valid_and_keep_their_own_values(blocks, k, m, seed):
    g = torch.Generator().manual_seed(seed)
    gate, up = torch.randn(128 * blocks, k, generator=g), torch.randn(128 * blocks, k, generator=g)
    fused = fuse_glu(gate, up, f"128:2:{m}")
    assert str(fused.pattern) == f"256:2:{m}" and fused.shape == (256 * blocks, k)
    pg, pu = split_glu(fused)
    for dense, pruned in ((gate, pg), (up, pu)):
        assert validate_vnm(pruned, f"128:2:{m}") is None
        kept = pruned != 0
        assert torch.equal(pruned[kept], dense[kept])
    # a V-block of gate and the same V-block of up keep the same columns: together at most 4 of each group
    union = (pg.reshape(blocks, 128, -1) != 0).any(1) | (pu.reshape(blocks, 128, -1) != 0).any(1)
    groups = -(-k // m)
    padded = torch.zeros(blocks, groups * m, dtype=torch.bool)
    padded[:, :k] = union
    assert (padded.reshape(blocks, groups, m).sum(-1) <= 4).all()


def test_interleave_round_trips():
    gate, up = torch.randn(384, 40), torch.randn(384, 40)
    both = interleave(gate, up)
    assert torch.equal(both[:128], gate[:128]) and torch.equal(both[128:256], up[:128])
    g2, u2 = deinterleave(both)
    assert torch.equal(g2, gate) and torch.equal(u2, up)


def test_joint_pruning_keeps_less_than_separate_but_close():
    torch.manual_seed(0)
    gate, up = torch.randn(512, 256), torch.randn(512, 256)
    kf = kept_fractions(gate, up, "128:2:8")
    assert kf["joint"] <= kf["separate"] and kf["joint"] > 0.95 * kf["separate"]


def test_fusion_rejects_what_it_cannot_take():
    with pytest.raises(PatternError, match="128:2:M"):
        fuse_glu(torch.randn(128, 32), torch.randn(128, 32), "64:2:8")
    with pytest.raises(ShapeError, match="hidden % 128"):
        fuse_glu(torch.randn(192, 32), torch.randn(192, 32), "128:2:8")
    with pytest.raises(ShapeError, match="one shape"):
        fuse_glu(torch.randn(128, 32), torch.randn(128, 64), "128:2:8")
    with pytest.raises(PatternError, match="256:2:M"):
        split_glu(compress_vnm(torch.randn(128, 32), "128:2:8", prune=True))


def test_family_rules():
    p = Problem(2048, 2 * 11008, 4096, F16, "256:2:8")
    assert GLU.check(GLU.heuristic(p), p) is None
    assert "no bias" in GLU.check(GLU.Config(), Problem(2048, 512, 4096, KernelTypes("f16", "f16", True), "256:2:8"))
    assert "V = 256" in GLU.check(GLU.Config(), Problem(2048, 512, 4096, F16, "128:2:8"))
    assert "hidden % 128" in GLU.check(GLU.Config(), Problem(2048, 640, 4096, F16, "256:2:8"))
    assert "shared memory" in GLU.check(GLU.Config(tile_k=128, stages=8), p)
    assert "own Config" in GLU.check(get_family("vnm_sm90").Config(), p)


@pytest.mark.parametrize("record", [{"tile_m": 128}, {"consumers": 1}, {"gather": 1}, {"tile_n": 256},
                                    {"tile_m": "256"}, {"stages": 6, "glu": 1}])
def test_config_from_record_accepts_only_its_space(record):
    with pytest.raises(ConfigError):
        GLU.Config.from_record(record)


def test_source_selects_the_swiglu_epilogue():
    src = GLU.source(GLU.Config(), F16)
    assert "constexpr int kGlu = 1;" in src and "constexpr int kTileM = 256;" in src and "${" not in src
    plain = get_family("vnm_sm90").source(get_family("vnm_sm90").Config(), F16)
    assert "constexpr int kGlu = 0;" in plain


def test_sm90_tile_m_256_rules():
    fam = get_family("vnm_sm90")
    p = Problem(2048, 4096, 4096, F16, "256:2:8")
    assert "consumers=2" in fam.check(fam.Config(tile_m=256, tile_n=64, consumers=1), p)
    assert "accumulators" in fam.check(fam.Config(tile_m=256, tile_n=256, consumers=2), p)
    assert fam.check(fam.Config(tile_m=256, tile_n=128, consumers=2, stages=6), p) is None


def _mlp(dim: int, hidden: int) -> nn.Module:
    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate_proj = nn.Linear(dim, hidden, bias=False)
            self.up_proj = nn.Linear(dim, hidden, bias=False)
            self.down_proj = nn.Linear(hidden, dim, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    return MLP()


def test_sparse_gated_mlp_on_cpu_state_dict_and_compile():
    torch.manual_seed(1)
    model = nn.ModuleDict({"mlp": _mlp(64, 256), "other": _mlp(64, 200)}).to(torch.bfloat16)  # V:N:M: fp16/bf16
    sparse = sparsify_gated_mlps(copy.deepcopy(model), "128:2:8", include=["*"])
    assert isinstance(sparse["mlp"], SparseGatedMLP)
    assert not isinstance(sparse["other"], SparseGatedMLP)  # hidden 200 % 128: left alone
    mod = sparse["mlp"]
    assert isinstance(mod.down_proj, SparseLinear) and str(mod.down_proj.pattern) == "128:2:8"
    gate, up, down = mod.dense_weights()
    x = torch.randn(3, 5, 64, dtype=torch.bfloat16)
    ref = (nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T
    torch.testing.assert_close(mod(x), ref)
    # pruned: gate/up keep 1/4 of the weights, each their own values
    dense = model["mlp"]
    assert (gate != 0).float().mean() == 0.25 and torch.equal(gate[gate != 0], dense.gate_proj.weight[gate != 0])
    assert "gate_up_values" in mod.state_dict() and "down_proj.meta" in mod.state_dict()
    fresh = SparseGatedMLP(64, 256, "128:2:8", dtype=torch.bfloat16)
    built = fresh._gate_up_view().layout(("test",), lambda w: w.meta.clone())  # as if it had run
    fresh.load_state_dict(mod.state_dict())
    torch.testing.assert_close(fresh(x), ref)
    assert torch.equal(built, mod.gate_up_meta)  # the layout built before follows the loaded weight, in place
    torch.testing.assert_close(torch.compile(mod, fullgraph=True)(x), ref)


def test_sparse_gated_mlp_rejects_biases_and_bad_patterns():
    mlp = _mlp(64, 256)
    with pytest.raises(PatternError, match="128:2:M"):
        SparseGatedMLP(64, 256, "64:2:8")
    with pytest.raises(PatternError, match="hidden"):
        SparseGatedMLP(64, 200, "128:2:8")
    mlp.up_proj = nn.Linear(64, 256, bias=True)
    with pytest.raises(PatternError, match="bias-free"):
        SparseGatedMLP.from_linears(mlp.gate_proj, mlp.up_proj, mlp.down_proj)
    with pytest.raises(InputError, match="vnm_sm90, which takes the dtypes f16/bf16"):  # fp32: no family runs it
        SparseGatedMLP.from_linears(_mlp(64, 256).gate_proj, mlp.gate_proj, mlp.down_proj)


def test_gated_mlp_op_cpu_path_applies_the_gpu_input_rules():
    mod = SparseGatedMLP.from_linears(*(lin.half() for lin in (lambda m: (m.gate_proj, m.up_proj, m.down_proj))(
        _mlp(64, 256))))
    with pytest.raises(InputError, match="dtype mismatch"):
        mod(torch.randn(2, 64, dtype=torch.bfloat16))
    with pytest.raises(InputError, match="float16 or bfloat16"):
        mod(torch.randn(2, 64))


def test_family_reference_is_the_transposed_swiglu_the_kernel_writes():
    """The tuner's worker checks candidates against family.reference in family.output_shape (hT, padded tokens)."""
    torch.manual_seed(2)
    gate, up = torch.randn(256, 48), torch.randn(256, 48)
    fused = fuse_glu(gate, up, "128:2:8")
    x = torch.randn(13, 48)
    ref = GLU.reference(x, fused)
    assert ref.shape == GLU.output_shape(13, 512) == (256, 16)
    pg, pu = split_glu(fused)
    h = nn.functional.silu(x.double() @ pg.double().T) * (x.double() @ pu.double().T)
    torch.testing.assert_close(ref[:, :13], h.T)
    assert (ref[:, 13:] == 0).all()

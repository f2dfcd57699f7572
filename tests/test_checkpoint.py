"""Checkpoints on the CPU: compressed-tensors sparse-24-bitmask checkpoints (written with the compressed-tensors
library) read into Sparse24Weight, and cutlass_nm's own safetensors format: round trips and refusals."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from torch import nn

import cutlass_nm
from cutlass_nm import CheckpointError, SparsityError
from cutlass_nm.checkpoint import load_compressed_tensors, load_sparse, load_sparse_into, save_sparse
from cutlass_nm.formats.meta_sm90 import PAD_NIBBLE
from cutlass_nm.nn import SparseLinear

st = pytest.importorskip("safetensors.torch")

H = torch.bfloat16  # 2:4 and V:N:M forwards take fp16/bf16 on every device


class Tiny(nn.Module):
    """A small transformer-ish block: dense tensors (embedding, norm) around two linear layers."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 64)
        self.norm = nn.LayerNorm(64)
        self.mlp = nn.ModuleDict({"up_proj": nn.Linear(64, 128), "down_proj": nn.Linear(128, 64, bias=False)})

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.mlp["down_proj"](torch.relu(self.mlp["up_proj"](self.norm(self.embed(ids)))))


LINEARS = ("mlp.up_proj", "mlp.down_proj")


def _pruned_tiny(seed: int = 0) -> Tiny:
    """Tiny in bf16 with 2:4-pruned linear weights, some groups all zero and some with one nonzero."""
    torch.manual_seed(seed)
    model = Tiny().to(H)
    with torch.no_grad():
        for name in LINEARS:
            w = model.get_submodule(name).weight
            _, mask = cutlass_nm.prune(w)
            w.mul_(mask)
            w[0, :8] = 0  # two empty groups
            w[1, :4] = torch.tensor([0, 0, 0, 1.5])  # one nonzero at the last position
    return model


def _ct_compress(state: dict[str, torch.Tensor], targets: tuple[str, ...] = LINEARS) -> dict[str, torch.Tensor]:
    """The state dict with the ``targets`` layers' weights compressed by compressed-tensors'
    Sparse24BitMaskCompressor, as llm-compressor saves a 2:4 model.

    compressed-tensors 0.20 keeps the format (config, pack_bitmasks) but no longer ships the legacy sparse
    compressors; there the same tensors are written as that compressor wrote them (shape as int64 (2, 1), values
    rows x k/2 in row-major order of the top-2 mask, bitmask packed by the library's pack_bitmasks)."""
    try:
        from compressed_tensors.compressors import Sparse24BitMaskCompressor
        from compressed_tensors.config import Sparse24BitMaskConfig
    except ImportError:
        from compressed_tensors.utils import pack_bitmasks
    else:
        compressor = Sparse24BitMaskCompressor(config=Sparse24BitMaskConfig())
        return compressor.compress(state, compression_targets=set(targets))
    out = {}
    for key, w in state.items():
        name = key.removesuffix(".weight")
        if name not in targets:
            out[key] = w
            continue
        groups = w.reshape(-1, 4)
        mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(1, groups.abs().topk(2, dim=1).indices, True)
        mask = mask.reshape(w.shape)
        out[f"{name}.shape"] = torch.tensor(list(w.shape)).reshape(-1, 1)
        out[f"{name}.compressed"] = w[mask].reshape(w.shape[0], w.shape[1] // 2)
        out[f"{name}.bitmask"] = pack_bitmasks(mask)
    return out


def _ct_config() -> dict:
    from compressed_tensors.config import Sparse24BitMaskConfig

    sparsity = Sparse24BitMaskConfig(targets=["Linear"]).model_dump(exclude={"registry_requires_subclass"})
    return {"architectures": ["Tiny"], "quantization_config": {
        "quant_method": "compressed-tensors", "version": "0.12.0", "sparsity_config": sparsity,
        "transform_config": {}}}


def _write_ct(tmp_path, compressed: dict[str, torch.Tensor], layout: str):
    """Write a compressed-tensors checkpoint: one file, a directory with config.json, or two index-listed shards."""
    tensors = {k: v.contiguous() for k, v in compressed.items()}
    if layout == "file":
        st.save_file(tensors, str(tmp_path / "weights.safetensors"))
        return tmp_path / "weights.safetensors"
    (tmp_path / "config.json").write_text(json.dumps(_ct_config()))
    if layout == "dir":
        st.save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
        return tmp_path
    keys = sorted(tensors)  # sharded: a layer's .bitmask and .compressed land in different files
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for file, names in shards.items():
        st.save_file({k: tensors[k] for k in names}, str(tmp_path / file), metadata={"format": "pt"})
    weight_map = {k: file for file, names in shards.items() for k in names}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return tmp_path


@pytest.mark.parametrize("layout", ["file", "dir", "sharded"])
def test_compressed_tensors_checkpoint_loads_exactly(tmp_path, layout):
    pytest.importorskip("compressed_tensors")
    ref = _pruned_tiny()
    path = _write_ct(tmp_path, _ct_compress(ref.state_dict()), layout)
    weights = load_compressed_tensors(path)
    assert sorted(weights) == sorted(LINEARS)
    for name, w in weights.items():
        dense = ref.get_submodule(name).weight.detach()
        assert w.shape == tuple(dense.shape) and w.dtype == H and w.values.device.type == "cpu"
        assert torch.equal(w.to_dense(), dense)  # element by element, padding groups included
        pos = w.positions()
        assert bool((pos[..., 0] < pos[..., 1]).all())
        x = torch.randn(5, dense.shape[1], dtype=H)
        ref_y = x.float() @ dense.float().T
        torch.testing.assert_close(torch.nn.functional.linear(x, w.to_dense()).float(), ref_y, rtol=1.6e-2, atol=1e-2)

    model = Tiny().to(H)  # other random weights: everything must come from the checkpoint
    assert load_compressed_tensors(path, model).keys() == weights.keys()
    for name in LINEARS:
        sl = model.get_submodule(name)
        assert isinstance(sl, SparseLinear) and str(sl.pattern) == "2:4"
        assert torch.equal(sl.weight_dense(), ref.get_submodule(name).weight.detach())
    ids = torch.randint(0, 10, (3, 7))
    with torch.no_grad():
        torch.testing.assert_close(model(ids).float(), ref(ids).float(), rtol=1.6e-2, atol=1e-2)
        x = torch.randn(4, 64, dtype=H)
        up = ref.mlp["up_proj"]
        want = x.float() @ up.weight.float().T + up.bias.float()
        torch.testing.assert_close(model.mlp["up_proj"](x).float(), want, rtol=1.6e-2, atol=1e-2)


class SwiGLU(nn.Module):
    """A transformers-style SwiGLU MLP (gate_proj, up_proj, down_proj, act_fn)."""

    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(64, 128, bias=False), nn.Linear(64, 128, bias=False)
        self.down_proj, self.act_fn = nn.Linear(128, 64, bias=False), act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def test_compressed_tensors_swiglu_loads_with_gate_and_up_stacked(tmp_path):
    """A SiLU MLP whose three projections load as 2:4 becomes one Sparse24GatedMLP (gate and up stacked as
    loaded, the same function); fuse_gate_up=False keeps them apart; a GELU MLP is left as loaded."""
    pytest.importorskip("compressed_tensors")
    from cutlass_nm.nn import Sparse24GatedMLP

    torch.manual_seed(3)
    ref = nn.ModuleDict({"silu": SwiGLU(nn.SiLU()), "gelu": SwiGLU(nn.GELU())}).to(H)
    targets = tuple(f"{m}.{p}" for m in ("silu", "gelu") for p in ("gate_proj", "up_proj", "down_proj"))
    with torch.no_grad():
        for name in targets:
            w = ref.get_submodule(name).weight
            w.mul_(cutlass_nm.prune(w)[1])
    path = _write_ct(tmp_path, _ct_compress(ref.state_dict(), targets), "file")
    model = nn.ModuleDict({"silu": SwiGLU(nn.SiLU()), "gelu": SwiGLU(nn.GELU())}).to(H)
    load_compressed_tensors(path, model)
    assert isinstance(model["silu"], Sparse24GatedMLP) and isinstance(model["gelu"].gate_proj, SparseLinear)
    apart = nn.ModuleDict({"silu": SwiGLU(nn.SiLU()), "gelu": SwiGLU(nn.GELU())}).to(H)
    load_compressed_tensors(path, apart, fuse_gate_up=False)
    assert isinstance(apart["silu"].gate_proj, SparseLinear)
    x = torch.randn(5, 64, dtype=H)
    with torch.no_grad():
        for name in ("silu", "gelu"):
            torch.testing.assert_close(model[name](x).float(), ref[name](x).float(), rtol=1.6e-2, atol=1e-2)
        torch.testing.assert_close(model["silu"](x), apart["silu"](x), rtol=1e-2, atol=1e-2)
    for got, lin in zip(model["silu"].dense_weights(), (ref["silu"].gate_proj, ref["silu"].up_proj,
                                                         ref["silu"].down_proj), strict=True):
        assert torch.equal(got, lin.weight)  # exactly the loaded weights, nothing pruned again


def test_bitmask_with_fewer_than_two_ones_pads_like_our_format(tmp_path, monkeypatch):
    """A bitmask of the nonzeros only (empty groups, single ones): kept ones, then the lowest free positions; converted
    a few rows at a time (a varying number of values per chunk)."""
    pytest.importorskip("compressed_tensors")
    monkeypatch.setattr(cutlass_nm.checkpoint.compressed_tensors, "_CHUNK", 3 * 128)
    from compressed_tensors.utils import pack_bitmasks

    w = _pruned_tiny().mlp["down_proj"].weight.detach()
    mask = w != 0
    st.save_file({"l.shape": torch.tensor([[64], [128]]), "l.compressed": w[mask], "l.bitmask": pack_bitmasks(mask)},
                 str(tmp_path / "w.safetensors"))
    got = load_compressed_tensors(tmp_path / "w.safetensors")["l"]
    assert torch.equal(got.to_dense(), w)
    assert int(got.groups()[0, 0]) == int(got.groups()[0, 1]) == PAD_NIBBLE  # empty groups: positions (0, 1)
    assert got.positions()[1, 0].tolist() == [0, 3]  # the one nonzero (position 3) and the lowest free one
    assert got.values[1, :2].tolist() == [0.0, 1.5]


def test_bitmask_group_with_three_ones_names_the_layer(tmp_path):
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.utils import pack_bitmasks

    w = torch.zeros(8, 16, dtype=H)
    w[:, 0::2] = 1.0
    w[5, 9] = 2.0  # row 5, group 2: three nonzeros
    mask = w != 0
    st.save_file({"model.fc.shape": torch.tensor([[8], [16]]), "model.fc.compressed": w[mask],
                  "model.fc.bitmask": pack_bitmasks(mask)}, str(tmp_path / "w.safetensors"))
    with pytest.raises(SparsityError, match=r"layer 'model.fc' is not 2:4.*3 of the 4 weights at row 5, columns 8..11"):
        load_compressed_tensors(tmp_path / "w.safetensors")


class QKV(nn.Module):
    """An attention's q/k/v projections of one input (GQA: k and v narrower), biased as Qwen2's."""

    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.q_proj = nn.Linear(64, 128, bias=bias)
        self.k_proj, self.v_proj = nn.Linear(64, 64, bias=bias), nn.Linear(64, 32, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat((self.q_proj(x), self.k_proj(x), self.v_proj(x)), -1)


@pytest.mark.parametrize("bias", [False, True])
def test_compressed_tensors_qkv_load_stacked(tmp_path, bias):
    """q/k/v that all load as 2:4 run as one StackedSparseLinear (parts under their names, the loaded weights
    exactly); stack_qkv=False keeps them apart; both compute what the masked dense layers compute."""
    pytest.importorskip("compressed_tensors")
    from cutlass_nm.nn import StackedPart, StackedSparseLinear

    torch.manual_seed(4)
    ref = QKV(bias).to(H)
    targets = ("q_proj", "k_proj", "v_proj")
    with torch.no_grad():
        for name in targets:
            w = ref.get_submodule(name).weight
            w.mul_(cutlass_nm.prune(w)[1])
    path = _write_ct(tmp_path, _ct_compress(ref.state_dict(), targets), "file")
    model, apart = QKV(bias).to(H), QKV(bias).to(H)
    load_compressed_tensors(path, model)
    load_compressed_tensors(path, apart, stack_qkv=False)
    assert isinstance(model.qkv_proj, StackedSparseLinear) and isinstance(model.k_proj, StackedPart)
    assert type(apart.k_proj) is SparseLinear and not hasattr(apart, "qkv_proj")
    for name in targets:
        assert torch.equal(model.get_submodule(name).weight_dense(), ref.get_submodule(name).weight)
    x = torch.randn(5, 64, dtype=H)
    with torch.no_grad():
        torch.testing.assert_close(model(x).float(), ref(x).float(), rtol=1.6e-2, atol=1e-2)
        torch.testing.assert_close(model(x), apart(x), rtol=1e-2, atol=1e-2)


def test_compressed_tensors_refusals(tmp_path, monkeypatch):
    pytest.importorskip("compressed_tensors")
    ref = _pruned_tiny()
    path = _write_ct(tmp_path, _ct_compress(ref.state_dict()), "dir")
    cfg = json.loads((path / "config.json").read_text())
    cfg["quantization_config"]["sparsity_config"]["format"] = "dense"
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"sparsity_config\.format is 'dense'"):
        load_compressed_tensors(path)
    with pytest.raises(CheckpointError, match="holds no sparse-24-bitmask layer"):
        st.save_file({"a": torch.zeros(3)}, str(tmp_path / "plain.safetensors"))
        load_compressed_tensors(tmp_path / "plain.safetensors")
    bad = _ct_compress(ref.state_dict())
    bad["mlp.up_proj.compressed"] = bad["mlp.up_proj.compressed"][:-1]  # one row of values short
    st.save_file({k: v.contiguous() for k, v in bad.items()}, str(tmp_path / "short.safetensors"))
    with pytest.raises(CheckpointError, match=r"'mlp\.up_proj'.*bitmask marks more weights"):
        load_compressed_tensors(tmp_path / "short.safetensors")
    wrong = Tiny().to(H)
    wrong.mlp["up_proj"] = nn.Linear(32, 128).to(H)
    st.save_file({k: v.contiguous() for k, v in _ct_compress(ref.state_dict()).items()},
                 str(tmp_path / "ok.safetensors"))
    with pytest.raises(CheckpointError, match=r"'mlp.up_proj' is 128x64 \(out x in\) in the checkpoint, 128x32"):
        load_compressed_tensors(tmp_path / "ok.safetensors", wrong)
    for module in [m for m in sys.modules if m.split(".")[0] == "compressed_tensors"]:
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install cutlass-nm\[hf\]"):
        load_compressed_tensors(tmp_path / "ok.safetensors")


# ------------------------------------------------------------------------------------------- our own format


def _sparse_model(seed: int = 0) -> nn.Sequential:
    """2:4, 128:2:8 (V:N:M) and 3:7 (general N:M, vector 32) layers with biases, a dense norm between."""
    torch.manual_seed(seed)
    dense = nn.Sequential(nn.Linear(64, 128), nn.LayerNorm(128), nn.Linear(128, 128), nn.Linear(128, 48)).to(H)
    model = nn.Sequential(SparseLinear.from_linear(dense[0], "2:4"), dense[1],
                          SparseLinear.from_linear(dense[2], "128:2:8"), SparseLinear.from_linear(dense[3], "3:7"))
    return model


def test_own_format_round_trip(tmp_path):
    model = _sparse_model()
    save_sparse(model, tmp_path / "m.safetensors")
    ckpt = load_sparse(tmp_path / "m.safetensors")
    assert ckpt.version == 2
    assert {n: (str(w.pattern), w.shape) for n, w in ckpt.layers.items()} == {
        "0": ("2:4", (128, 64)), "2": ("128:2:8", (128, 128)), "3": ("3:7", (48, 128))}
    assert ckpt.layers["3"].vector == 32 and sorted(ckpt.tensors) == ["0.bias", "1.bias", "1.weight", "2.bias",
                                                                       "3.bias"]
    for name, w in ckpt.layers.items():
        assert torch.equal(w.to_dense(), model.get_submodule(name).weight_dense())

    x = torch.randn(6, 64, dtype=H)
    fresh = nn.Sequential(nn.Linear(64, 128), nn.LayerNorm(128), nn.Linear(128, 128), nn.Linear(128, 48)).to(H)
    assert load_sparse_into(fresh, tmp_path / "m.safetensors") is fresh
    assert [type(m).__name__ for m in fresh] == ["SparseLinear", "LayerNorm", "SparseLinear", "SparseLinear"]
    assert [str(m.pattern) for m in fresh if isinstance(m, SparseLinear)] == ["2:4", "128:2:8", "3:7"]
    with torch.no_grad():
        assert torch.equal(fresh(x), model(x))

    other = _sparse_model(seed=1)  # SparseLinear modules of the same patterns are filled in place
    layout = other[0]._view().layout(("test",), lambda w: w.meta.clone())  # as if it had run: a layout built
    load_sparse_into(other, tmp_path / "m.safetensors")
    with torch.no_grad():
        assert torch.equal(other(x), model(x))
    assert torch.equal(layout, model[0].meta)  # rebuilt from the loaded weight, in place

    lin = nn.Linear(64, 48).to(H)  # a state dict of compressed weights and tensors
    w = cutlass_nm.compress(lin.weight.detach(), "2:4", prune=True)
    save_sparse({"fc": w, "fc.bias": lin.bias.detach()}, tmp_path / "sd.safetensors")
    holder = nn.ModuleDict({"fc": nn.Linear(64, 48).to(H)})
    load_sparse_into(holder, tmp_path / "sd.safetensors")
    assert torch.equal(holder["fc"].weight_dense(), w.to_dense()) and torch.equal(holder["fc"].bias, lin.bias)
    save_sparse(SparseLinear.from_linear(lin), tmp_path / "bare.safetensors")  # a bare layer: replaced whole
    bare = load_sparse_into(nn.Linear(64, 48).to(H), tmp_path / "bare.safetensors")
    assert isinstance(bare, SparseLinear) and torch.equal(bare.weight_dense(), w.to_dense())


def _tamper(src, dst, *, metadata=None, tensors=None) -> None:
    from safetensors import safe_open

    with safe_open(str(src), framework="pt") as f:
        meta, data = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    meta.update(metadata or {})
    data.update(tensors or {})
    st.save_file(data, str(dst), metadata=meta)


def test_own_format_reads_version_1_files(tmp_path):
    """A version-1 file holds a 2:4 layer's metadata as per-group nibbles (rows x k/4): it loads as the same weight,
    and its nibbles are checked as such."""
    model = _sparse_model()
    save_sparse(model, tmp_path / "m.safetensors")
    groups = model[0].compressed().groups()
    assert groups.shape == (128, 16)
    _tamper(tmp_path / "m.safetensors", tmp_path / "v1.safetensors", metadata={"format": "cutlass_nm.sparse/1"},
            tensors={"0.meta": groups})
    ckpt = load_sparse(tmp_path / "v1.safetensors")
    assert ckpt.version == 1 and torch.equal(ckpt.layers["0"].meta, model[0].meta)
    _tamper(tmp_path / "v1.safetensors", tmp_path / "bad.safetensors", tensors={"0.meta": groups | 0x10})
    with pytest.raises(CheckpointError, match="not ascending"):
        load_sparse(tmp_path / "bad.safetensors")


def test_own_format_refusals(tmp_path):
    good = tmp_path / "m.safetensors"
    save_sparse(_sparse_model(), good)
    data = good.read_bytes()
    (tmp_path / "trunc.safetensors").write_bytes(data[: len(data) // 2])
    st.save_file({"0.values": torch.zeros(128, 32, dtype=H)}, str(tmp_path / "foreign.safetensors"))
    _tamper(good, tmp_path / "v3.safetensors", metadata={"format": "cutlass_nm.sparse/3"})
    _tamper(good, tmp_path / "shape.safetensors", tensors={"0.values": torch.zeros(128, 31, dtype=H)})
    _tamper(good, tmp_path / "meta.safetensors", tensors={"0.meta": torch.full((1, 1024), 0x41, dtype=torch.uint8)})
    cases = {
        "trunc": "not a readable safetensors file",
        "foreign": "not a cutlass_nm sparse checkpoint: its safetensors metadata has no 'format'",
        "v3": "format version 3 by a newer cutlass_nm; this version reads versions 1 to 2",
        "shape": r"layer '0' \(2:4, 128x64\): tensor 'values' is \(128, 31\) torch.bfloat16, expected \(128, 32\)",
        "meta": "layer '0' .2:4.: meta holds a nibble whose kept positions are not ascending",
        "missing": "no such file",
    }
    for name, message in cases.items():
        with pytest.raises(CheckpointError, match=message):
            load_sparse(tmp_path / f"{name}.safetensors")
    with pytest.raises(CheckpointError, match="format version 3"):
        load_sparse_into(_sparse_model(), tmp_path / "v3.safetensors")
    small = nn.Sequential(nn.Linear(64, 96), nn.LayerNorm(128), nn.Linear(128, 128), nn.Linear(128, 48)).to(H)
    with pytest.raises(CheckpointError, match=r"layer '0' is 128x64 \(out x in\) in the checkpoint, 96x64"):
        load_sparse_into(small, good)
    vnm_as_24 = _sparse_model()
    vnm_as_24[2] = SparseLinear(128, 128, pattern="2:4", dtype=H)
    with pytest.raises(CheckpointError, match=r"layer '2' is 128:2:8 .* in the checkpoint, 2:4"):
        load_sparse_into(vnm_as_24, good)
    extra = nn.Sequential(*_sparse_model(), nn.Linear(48, 8).to(H))
    with pytest.raises(CheckpointError, match=r"model tensor\(s\) not in the checkpoint, e.g. \['4.weight'"):
        load_sparse_into(extra, good)
    load_sparse_into(extra, good, strict=False)
    with pytest.raises(CheckpointError, match="a folder, not a file"):
        load_sparse(tmp_path)
    with pytest.raises(CheckpointError, match="does not exist; create it first"):
        save_sparse(_sparse_model(), tmp_path / "no" / "such" / "folder" / "m.safetensors")


def test_fp8_layers_round_trip_and_are_checked(tmp_path):
    """FP8 2:4 layers: the uint8 value bytes and float32 scales with ``"fp8": true``, back bit for bit, into an
    nn.Linear model or a matching FP8 SparseLinear; metadata that claims FP8 for another pattern is refused."""
    torch.manual_seed(3)
    dense = nn.Sequential(nn.Linear(64, 128), nn.Linear(128, 48)).to(H)
    model = cutlass_nm.sparsify(dense, "2:4", fp8=True, force=True)
    path = tmp_path / "fp8.safetensors"
    save_sparse(model, path)
    layers = json.loads(_metadata(path)["layers"])
    assert layers["0"]["fp8"] is True and layers["0"]["dtype"] == "float8_e4m3fn"
    fresh = load_sparse_into(nn.Sequential(nn.Linear(64, 128), nn.Linear(128, 48)).to(H), path)
    assert all(m.fp8 for m in fresh)
    x = torch.randn(3, 64, dtype=H)
    assert torch.equal(fresh(x), model(x))
    w8 = cutlass_nm.prune(torch.randn(64, 128, dtype=H), dtype=torch.float8_e4m3fn)[0]
    save_sparse({"l": w8}, tmp_path / "w.safetensors")
    back = load_sparse(tmp_path / "w.safetensors").layers["l"]
    assert torch.equal(back.to_dense(), w8.to_dense()) and torch.equal(back.scale, w8.scale)
    with pytest.raises(CheckpointError, match=r"\(vector 0, fp8 True\) in the checkpoint, 2:4 \(vector 0, fp8 False\)"):
        load_sparse_into(nn.Sequential(SparseLinear(64, 128, dtype=H), nn.Linear(128, 48).to(H)), path)
    bad = json.loads(_metadata(path)["layers"])
    bad["0"]["pattern"] = "128:2:8"
    _tamper(path, tmp_path / "bad.safetensors", metadata={"layers": json.dumps(bad)})
    with pytest.raises(CheckpointError, match="fp8 layers are 2:4"):
        load_sparse(tmp_path / "bad.safetensors")


def _metadata(path) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return f.metadata()

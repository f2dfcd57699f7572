"""Our checkpoint format, ``cutlass_nm.sparse/2``: safetensors with a metadata header (docs/checkpoints.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import CheckpointError, CutlassNMError
from ..formats import AnyWeight, NMWeight, Sparse24Weight, VNMWeight, meta_sm90, positions_problem
from ..formats.fp8 import E4M3, NMFP8Weight, Sparse24FP8Weight, VNMFP8Weight
from ..formats.nm import VECTORS
from ..nn import SparseLinear
from ..patterns import Pattern
from .files import DTYPES, PathLike, install, open_safetensors, safetensors_module, tensor_key, weight_tensors

FORMAT = "cutlass_nm.sparse"
VERSION = 2  # 2: 2:4 meta in its packed form (formats/sparse24.py); 1: per-group nibbles, read too


@dataclass
class SparseCheckpoint:
    """What :func:`load_sparse` read: compressed weights by layer name, every other tensor by its state-dict name
    (a sparse layer's bias is ``<layer>.bias`` there), and the file's format version."""

    layers: dict[str, AnyWeight]
    tensors: dict[str, torch.Tensor]
    version: int




def _layer_meta(w: AnyWeight, bias: bool) -> dict[str, Any]:
    if isinstance(w, NMFP8Weight | VNMFP8Weight):
        raise CheckpointError(f"an FP8 {w.pattern} weight has no place in the {FORMAT} format (its FP8 layers are "
                              "2:4); save the 16-bit weight it was quantized from")
    meta = {"pattern": str(w.pattern), "in_features": w.in_features, "out_features": w.out_features,
            "vector": getattr(w, "vector", 0), "dtype": str(w.dtype).removeprefix("torch."), "bias": bias}
    if isinstance(w, Sparse24FP8Weight):
        meta["fp8"] = True  # values stored as their uint8 bytes, with a float32 scale per row
    return meta


def save_sparse(model_or_state_dict: nn.Module | Mapping[str, torch.Tensor | AnyWeight], path: PathLike) -> None:
    """Write a compressed model to ``path`` (safetensors, format ``cutlass_nm.sparse/2``).

    A module: its whole ``state_dict`` (``SparseLinear`` layers as their compressed buffers) plus one metadata
    entry per ``SparseLinear``. A mapping: tensors are written under their names; a compressed weight
    (Sparse24Weight, VNMWeight, NMWeight) under ``<name>.values`` etc. as sparse layer ``name`` (its bias, if any,
    is the tensor ``<name>.bias``). Tensors sharing storage (tied weights) are written once each, copied.
    """
    st = safetensors_module()
    layers: dict[str, dict[str, Any]] = {}
    tensors: dict[str, torch.Tensor] = {}
    if isinstance(model_or_state_dict, nn.Module):
        tensors.update(model_or_state_dict.state_dict())
        for name, mod in model_or_state_dict.named_modules():
            if isinstance(mod, SparseLinear):
                layers[name] = _layer_meta(mod.compressed(), mod.bias is not None)
    elif isinstance(model_or_state_dict, Mapping):
        for name, item in model_or_state_dict.items():
            if isinstance(item, torch.Tensor):
                tensors[name] = item
            elif isinstance(item, Sparse24Weight | VNMWeight | NMWeight):
                layers[name] = _layer_meta(item, tensor_key(name, "bias") in model_or_state_dict)
                tensors.update({tensor_key(name, b): t for b, t in weight_tensors(item).items()})
            else:
                raise CheckpointError(f"save_sparse: entry {name!r} is a {type(item).__name__}, not a tensor or a "
                                      "compressed weight")
    else:
        raise CheckpointError(f"save_sparse takes an nn.Module or a state dict, got {type(model_or_state_dict)}")
    seen: set[int] = set()
    out = {}
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        ptr = t.untyped_storage().data_ptr()
        out[name] = t.clone() if ptr in seen and t.numel() else t
        seen.add(ptr)
    metadata = {"format": f"{FORMAT}/{VERSION}", "layers": json.dumps(layers, sort_keys=True)}
    folder = Path(path).parent
    if not folder.is_dir():
        raise CheckpointError(f"save_sparse: the folder {folder} does not exist; create it first")
    try:
        st.torch.save_file(out, str(path), metadata=metadata)
    except (OSError, st.SafetensorError) as exc:
        raise CheckpointError(f"save_sparse could not write {path}: {exc}") from exc


def _version(path: Path, header: dict[str, str] | None) -> int:
    fmt = (header or {}).get("format")
    if fmt is None:
        raise CheckpointError(f"{path} is not a cutlass_nm sparse checkpoint: its safetensors metadata has no "
                              "'format' (a compressed-tensors checkpoint? use load_compressed_tensors)")
    name, _, version = fmt.partition("/")
    if name != FORMAT or not version.isdigit() or int(version) < 1:
        raise CheckpointError(f"{path} is not a cutlass_nm sparse checkpoint: format {fmt!r}, expected "
                              f"'{FORMAT}/{VERSION}'")
    if int(version) > VERSION:
        raise CheckpointError(f"{path} was written in format version {version} by a newer cutlass_nm; this version "
                              f"reads versions 1 to {VERSION}: upgrade cutlass-nm")
    return int(version)


def _expected(info: dict[str, Any], version: int = VERSION
              ) -> tuple[Pattern, int, dict[str, tuple[tuple[int, ...], torch.dtype]]]:
    """Pattern, vector and the expected (shape, dtype) of every tensor of one layer's metadata entry in a file of
    format ``version``."""
    p = Pattern.parse(info["pattern"])
    dtype = DTYPES[info["dtype"]]
    n, k, vector = int(info["out_features"]), int(info["in_features"]), int(info["vector"])
    if n < 1 or k < 1 or not isinstance(info["bias"], bool):
        raise ValueError("out_features and in_features must be >= 1 and bias a bool")
    u8 = torch.uint8
    fp8 = info.get("fp8", False)
    if fp8 is not False and (fp8 is not True or dtype != E4M3 or not p.is_24):
        raise ValueError("fp8 layers are 2:4 with dtype float8_e4m3fn")
    if p.is_24:
        if k % 4:
            raise ValueError(f"2:4 needs in_features % 4 == 0, got {k}")
        meta = (n, k // 4) if version == 1 else meta_sm90.packed_shape(n, k)
        if fp8:
            return p, 0, {"values": ((n, k // 2), u8), "meta": (meta, u8), "scale": ((n,), torch.float32)}
        return p, 0, {"values": ((n, k // 2), dtype), "meta": (meta, u8)}
    if dtype == E4M3:
        raise ValueError(f"float8_e4m3fn values need fp8: true and the 2:4 pattern, got {p}")
    g = -(-k // p.m)
    if p.is_vnm:
        return p, 0, {"values": ((n, 2 * g), dtype), "columns": ((-(-n // p.v), g, 4), u8),
                      "meta": ((n, g), u8)}
    if vector not in VECTORS:
        raise ValueError(f"vector must be one of {VECTORS}, got {vector}")
    return p, vector, {"values": ((n, g * p.n), dtype), "indices": ((-(-n // vector), g * p.n), u8)}


def _weight(p: Pattern, t: dict[str, torch.Tensor], shape: tuple[int, int], vector: int, version: int
            ) -> AnyWeight:
    if p.is_24 and version == 1:  # per-group nibbles, packed now
        t = {**t, "meta": meta_sm90.pack(t["meta"], shape[1])}
    if "scale" in t:
        return Sparse24FP8Weight(t["values"].view(E4M3), t["meta"], shape, scale=t["scale"])
    if p.is_24:
        return Sparse24Weight(t["values"], t["meta"], shape)
    if p.is_vnm:
        return VNMWeight(t["values"], t["columns"], t["meta"], shape, p)
    return NMWeight(t["values"], t["indices"], shape, p, vector)


def load_sparse(path: PathLike, *, device: torch.device | str = "cpu") -> SparseCheckpoint:
    """Read a :func:`save_sparse` file onto ``device``, checking the format version (newer: refused), each layer's
    pattern, shapes, dtypes and kept positions against the metadata. Any failure: one CheckpointError."""
    path = Path(path)
    with ExitStack() as stack:
        f = open_safetensors(path, stack)
        version = _version(path, f.metadata())
        try:
            entries = json.loads(f.metadata().get("layers", "{}"))
        except ValueError:
            entries = None
        if not isinstance(entries, dict):
            raise CheckpointError(f"{path}: its 'layers' metadata is not a JSON object")
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (a safe_open handle, not a dict)
    layers: dict[str, AnyWeight] = {}
    for name, info in entries.items():
        try:
            p, vector, expected = _expected(info, version)
        except (KeyError, TypeError, ValueError, CutlassNMError) as exc:
            raise CheckpointError(f"{path}: layer {name!r} has invalid metadata {info!r}: {exc}") from None
        parts = {}
        for buf, (shape, want) in expected.items():
            t = tensors.pop(tensor_key(name, buf), None)
            if t is None:
                raise CheckpointError(f"{path}: layer {name!r} ({p}) lacks its tensor {tensor_key(name, buf)!r}")
            if tuple(t.shape) != shape or t.dtype != want:
                raise CheckpointError(f"{path}: layer {name!r} ({p}, {info['out_features']}x{info['in_features']}): "
                                      f"tensor {buf!r} is {tuple(t.shape)} {t.dtype}, expected {shape} {want}")
            parts[buf] = t.to(device)
        bias = tensors.get(tensor_key(name, "bias"))
        if info["bias"] != (bias is not None) or (bias is not None and tuple(bias.shape) != (info["out_features"],)):
            raise CheckpointError(f"{path}: layer {name!r}: metadata says bias={info['bias']}, the file holds "
                                  f"{'no bias' if bias is None else f'a bias of shape {tuple(bias.shape)}'}")
        if (why := positions_problem(p, parts, groups=version == 1)) is not None:
            raise CheckpointError(f"{path}: layer {name!r} ({p}): {why}")
        layers[name] = _weight(p, parts, (int(info["out_features"]), int(info["in_features"])), vector, version)
    return SparseCheckpoint(layers, {k: t.to(device) for k, t in tensors.items()}, version)


def load_sparse_into(model: nn.Module, path: PathLike, *, strict: bool = True) -> nn.Module:
    """Load a :func:`save_sparse` file into ``model`` in place: each sparse layer replaces the ``nn.Linear`` of
    that name (a SparseLinear in the linear's dtype and device; values cast to it) or fills a SparseLinear of the
    same pattern; every other tensor is copied into the model's tensor of that name. Tensors the model lacks,
    shape or pattern mismatches, and (``strict``) model tensors the file lacks raise CheckpointError. Returns
    ``model`` (for a bare ``nn.Linear`` replaced whole: its SparseLinear)."""
    ckpt = load_sparse(path)
    return install(model, ckpt.layers, ckpt.tensors, strict=strict, source=str(path))


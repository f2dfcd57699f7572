"""compressed-tensors ``sparse-24-bitmask`` checkpoints (llm-compressor's 2:4 output) read into 2:4 weights."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import torch
from torch import nn

from ..errors import CheckpointError, SparsityError
from ..formats import Sparse24Weight
from ..nn import QKV_NAMES, STACKED_QKV, fuse_sparse_gated_mlps, stack_sparse_linears
from .files import DTYPES, HF_EXTRA, PathLike, install, open_safetensors

_CHUNK = 1 << 22  # dense elements converted at a time from a bitmask


_BITS = torch.arange(4, dtype=torch.uint8)
_ONES = torch.tensor([bin(c).count("1") for c in range(16)])


def _nibble(code: int) -> int:
    """Our 2:4 nibble for a group whose marked positions are the bits of ``code`` (at most 2): the marked ones,
    then the lowest unmarked ones, ascending; an empty group gets (0, 1) = PAD_NIBBLE."""
    ones = [i for i in range(4) if code >> i & 1]
    first, second = sorted((ones + [i for i in range(4) if i not in ones])[:2])
    return first | second << 2


_NIBBLE = torch.tensor([_nibble(c) for c in range(16)], dtype=torch.uint8)


def _compressed_tensors() -> tuple[Callable[[torch.Tensor, list[int]], torch.Tensor], str]:
    try:
        from compressed_tensors.config import CompressionFormat
        from compressed_tensors.utils import unpack_bitmasks
    except ImportError:
        raise ImportError(f"load_compressed_tensors needs the compressed-tensors package: {HF_EXTRA}") from None
    return unpack_bitmasks, CompressionFormat.sparse_24_bitmask.value


def _ct_files(path: Path, fmt: str) -> list[Path]:
    """The safetensors files of a compressed-tensors checkpoint (a file, or a directory with config.json whose
    ``quantization_config.sparsity_config.format`` must be ``fmt``)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such file or directory")
    config = path / "config.json"
    if config.is_file():
        try:
            cfg = json.loads(config.read_text())
            qc = cfg.get("quantization_config") or cfg.get("compression_config") or {}
            sparsity = (qc.get("sparsity_config") or {}).get("format")
            groups = qc.get("config_groups")
        except (ValueError, AttributeError):
            raise CheckpointError(f"{config} is not a JSON model config with a quantization_config") from None
        if sparsity != fmt:
            raise CheckpointError(f"{path} is not a compressed-tensors {fmt} checkpoint: its config.json "
                                  f"quantization_config.sparsity_config.format is {sparsity!r}")
        if groups:
            raise CheckpointError(f"{path} holds quantized weights (quantization_config.config_groups); cutlass_nm "
                                  "loads fp16/bf16/fp32 2:4 checkpoints only")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise CheckpointError(f"{index} is not a safetensors index (no 'weight_map')") from None
        return [path / f for f in files]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path} holds no .safetensors file")
    return files


def _from_bitmask(name: str, compressed: torch.Tensor, bitmask: torch.Tensor, shape: torch.Tensor,
                  unpack: Callable[[torch.Tensor, list[int]], torch.Tensor]) -> Sparse24Weight:
    """compressed-tensors' (values in row-major order of the bitmask's ones, bitmask packed 8 per byte, little
    bit order) to a Sparse24Weight, on the CPU, ``_CHUNK`` elements at a time. A group with fewer than 2 ones keeps
    its marked position(s), then the lowest unmarked ones (an empty group: positions 0, 1 = PAD_NIBBLE), value 0."""
    dims = shape.flatten().tolist()
    if len(dims) != 2 or min(dims) < 1:
        raise CheckpointError(f"layer {name!r}: its shape tensor holds {dims}, not (out_features, in_features)")
    rows, k = (int(d) for d in dims)
    if k % 4:
        raise CheckpointError(f"layer {name!r}: in_features = {k} is not a multiple of 4, so it cannot be 2:4")
    if compressed.dtype not in DTYPES.values():
        raise CheckpointError(f"layer {name!r} holds {compressed.dtype} values (quantized?); cutlass_nm loads "
                              "fp16/bf16/fp32 2:4 weights only")
    if bitmask.dtype != torch.uint8 or tuple(bitmask.shape) != (rows, -(-k // 8)):
        raise CheckpointError(f"layer {name!r}: bitmask is {tuple(bitmask.shape)} {bitmask.dtype}, expected "
                              f"{(rows, -(-k // 8))} torch.uint8 for a {rows}x{k} weight")
    flat = compressed.reshape(-1)
    values = torch.empty(rows, k // 2, dtype=compressed.dtype)
    meta = torch.empty(rows, k // 4, dtype=torch.uint8)
    step, off = max(1, _CHUNK // k), 0
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        mask = unpack(bitmask[r0:r1], [r1 - r0, k]).reshape(r1 - r0, k // 4, 4)
        code = (mask.to(torch.uint8) << _BITS).sum(-1)  # the group's 4 mask bits, 0..15
        count = _ONES[code]
        if bool((count > 2).any()):
            r, g = (int(i) for i in torch.nonzero(count > 2)[0])
            raise SparsityError(f"layer {name!r} is not 2:4-sparse: its bitmask keeps {int(count[r, g])} of the 4 "
                                f"weights at row {r0 + r}, columns {4 * g}..{4 * g + 3} "
                                f"({int((count > 2).sum())} such group(s) in rows {r0}..{r1 - 1})")
        n = int(count.sum())
        if off + n > flat.numel():
            raise CheckpointError(f"layer {name!r}: its bitmask marks more weights than its {flat.numel()} "
                                  "compressed values")
        meta[r0:r1] = _NIBBLE[code]
        if n == 2 * mask[..., 0].numel():  # every group marks 2: the values are ours already, in order
            values[r0:r1] = flat[off:off + n].reshape(r1 - r0, k // 2)
        else:
            dense = torch.zeros(mask.shape, dtype=compressed.dtype)
            dense[mask] = flat[off:off + n]
            m = meta[r0:r1].to(torch.int64)
            values[r0:r1] = dense.gather(-1, torch.stack((m & 3, m >> 2), -1)).reshape(r1 - r0, k // 2)
        off += n
    if off != flat.numel():
        raise CheckpointError(f"layer {name!r}: {flat.numel()} compressed values, but its bitmask marks {off}")
    return Sparse24Weight.from_groups(values, meta, (rows, k))


def load_compressed_tensors(path: PathLike, model: nn.Module | None = None, *, strict: bool = False,
                            fuse_gate_up: bool = True, stack_qkv: bool = True) -> dict[str, Sparse24Weight]:
    """Read a compressed-tensors ``sparse-24-bitmask`` checkpoint: a directory (config.json's
    ``quantization_config.sparsity_config.format`` checked; ``model.safetensors``, shards listed by
    ``model.safetensors.index.json``, or every ``*.safetensors``) or one ``.safetensors`` file. Every layer stored
    as ``<layer>.shape`` / ``.compressed`` / ``.bitmask`` becomes a CPU ``Sparse24Weight``, returned by layer name.

    With ``model``, also installs them as for :func:`load_sparse_into` (the ``nn.Linear`` named ``<layer>``
    becomes a 2:4 SparseLinear) and loads every other tensor by name (``strict``: every model tensor must be there);
    with ``fuse_gate_up``, each SiLU MLP whose gate, up and down all load as 2:4 layers then runs its gate and up as
    one stacked weight (``nn.fuse_sparse_gated_mlps``); with ``stack_qkv``, each module whose ``q_proj``, ``k_proj``
    and ``v_proj`` all load as 2:4 layers runs them as one (``nn.stack_sparse_linears``, as ``sparsify_model``).
    Needs compressed-tensors (``pip install cutlass-nm[hf]``). A group with more than 2 ones: SparsityError."""
    unpack, fmt = _compressed_tensors()
    path = Path(path)
    files = _ct_files(path, fmt)
    with ExitStack() as stack:
        handles = {file: open_safetensors(file, stack) for file in files}
        where = {key: f for f in handles.values() for key in f.keys()}  # noqa: SIM118
        if any(key.endswith(".row_offsets") for key in where):
            raise CheckpointError(f"{path} is in the unstructured sparse-bitmask format ('.row_offsets' tensors), "
                                  f"not {fmt}")
        names = sorted(key.removesuffix(".bitmask") for key in where if key.endswith(".bitmask"))
        if not names:
            raise CheckpointError(f"{path} holds no {fmt} layer (no '<layer>.bitmask' tensor)")
        weights = {}
        for name in names:
            parts = [f"{name}.{p}" for p in ("compressed", "bitmask", "shape")]
            if lacking := [p for p in parts if p not in where]:
                raise CheckpointError(f"{path}: layer {name!r} lacks {lacking}")
            weights[name] = _from_bitmask(name, *(where[p].get_tensor(p) for p in parts), unpack)
        if model is not None:
            held = {f"{n}.{p}" for n in names for p in ("compressed", "bitmask", "shape")}
            dense = {key: f.get_tensor(key) for key, f in where.items() if key not in held}
            install(model, weights, dense, strict=strict, source=str(path))
            if fuse_gate_up:
                fuse_sparse_gated_mlps(model)
            if stack_qkv:
                for attn in list(model.modules()):
                    stack_sparse_linears(attn, QKV_NAMES, STACKED_QKV)
    return weights

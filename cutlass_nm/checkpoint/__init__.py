"""Checkpoints: compressed models as safetensors (format ``cutlass_nm.sparse/2``), and compressed-tensors
``sparse-24-bitmask`` checkpoints (llm-compressor's 2:4 output) read straight into 2:4 weights.

* :func:`save_sparse` writes a model's ``SparseLinear`` buffers (and every other tensor, as is) with a metadata
  header naming each sparse layer's pattern, shape, vector and dtype (docs/checkpoints.md);
  :func:`load_sparse` reads it back, checking format version, patterns, shapes and dtypes;
  :func:`load_sparse_into` installs it into a model.
* :func:`load_compressed_tensors` converts bitmask + values to ``Sparse24Weight`` on the CPU, row chunk by row
  chunk, never building a dense copy on the GPU.

Every unreadable, foreign, truncated or inconsistent file raises :class:`CheckpointError` (a group of more than 2
kept weights in a bitmask: :class:`SparsityError`), naming the file and layer.
"""

from .compressed_tensors import load_compressed_tensors
from .native import FORMAT, VERSION, SparseCheckpoint, load_sparse, load_sparse_into, save_sparse

__all__ = ["FORMAT", "VERSION", "SparseCheckpoint", "load_compressed_tensors", "load_sparse", "load_sparse_into",
           "save_sparse"]

"""Modules: ``SparseLinear`` (an ``nn.Linear`` with a 2:4-, V:N:M- or general N:M-compressed weight) and
``sparsify``; ``StackedSparseLinear`` (sparse layers of one input as one weight, e.g. an attention's q/k/v);
``SparseGatedMLP`` and ``Sparse24GatedMLP`` (SwiGLU MLPs whose gate and up run as one kernel) with
``sparsify_gated_mlps``; and ``precompile_model``."""

from .gated import GATED_NAMES, Sparse24GatedMLP, SparseGatedMLP, fuse_sparse_gated_mlps, has_silu, sparsify_gated_mlps
from .linear import SparseLinear, SparsifySummary, cached_view, direct_call, sparsify, weight_tensors
from .model import precompile_model, refresh_module_layouts
from .stacked import FUSED_ROWS, QKV_NAMES, STACKED_QKV, StackedPart, StackedSparseLinear, stack_sparse_linears

__all__ = ["FUSED_ROWS", "GATED_NAMES", "QKV_NAMES", "STACKED_QKV", "Sparse24GatedMLP", "SparseGatedMLP",
           "SparseLinear", "SparsifySummary", "StackedPart", "StackedSparseLinear", "cached_view", "direct_call",
           "fuse_sparse_gated_mlps", "has_silu", "precompile_model", "refresh_module_layouts", "sparsify",
           "sparsify_gated_mlps", "stack_sparse_linears", "weight_tensors"]

"""2:4 on Ampere Sparse Tensor Cores: CUTLASS's ``SparseGemm`` (mma.sp m16n8k32, cp.async multistage)."""

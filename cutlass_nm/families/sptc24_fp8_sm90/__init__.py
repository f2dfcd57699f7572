"""FP8 (e4m3) 2:4 on Hopper Sparse Tensor Cores: CUTLASS's wgmma.sp collective, scales fused in the epilogue."""

"""2:4 on Hopper Sparse Tensor Cores: CUTLASS's wgmma.sp collective, TMA, warp-specialized."""

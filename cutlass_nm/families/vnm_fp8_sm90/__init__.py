"""FP8 (e4m3) V:N:M on Hopper Sparse Tensor Cores: wgmma.sp e4m3, B transposed by the producer."""

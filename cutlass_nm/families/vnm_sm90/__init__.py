"""V:N:M (VENOM) on Hopper Sparse Tensor Cores: wgmma.sp over the gathered 2:4 weight, B rows gathered per CTA."""

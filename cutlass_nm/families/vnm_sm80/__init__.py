"""V:N:M (VENOM) on Ampere Sparse Tensor Cores: mma.sp m16n8k32 over the gathered 2:4 weight; runs on sm_80+."""

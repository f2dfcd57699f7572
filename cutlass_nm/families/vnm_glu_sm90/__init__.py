"""SwiGLU over co-pruned V:N:M gate and up weights on Hopper: one wgmma.sp GEMM, one gathered B for both."""

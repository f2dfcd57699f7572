"""General N:M SpMM on CUDA cores: any 1 <= N < M <= 64, fp32 or fp16/bf16 inputs."""

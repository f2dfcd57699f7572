"""N:M and V:N:M decode on CUDA cores: m = 1-16 tokens, lanes along k, any index-sharing vector."""

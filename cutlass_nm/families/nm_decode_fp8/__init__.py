"""FP8 N:M and V:N:M decode on CUDA cores: one token, e4m3 values and 4-bit positions streamed at memory speed."""

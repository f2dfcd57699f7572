"""FP8 2:4 decode on CUDA cores: one token, e4m3 values and packed metadata streamed at memory speed."""

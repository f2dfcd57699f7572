"""2:4 decode on CUDA cores: m = 1-16 tokens, a 2:4 weight's values and meta bytes streamed in place."""

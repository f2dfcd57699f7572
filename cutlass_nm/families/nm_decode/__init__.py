"""N:M and V:N:M decode: m = 1-16 tokens, weights streamed at memory speed."""

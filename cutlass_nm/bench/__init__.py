"""Benchmark harness: timing, baselines (cuBLAS, cuSPARSELt), environment header and result files."""

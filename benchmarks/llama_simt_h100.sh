#!/usr/bin/env bash
# One device call: the LLaMA-7B block (dense vs 2:4 and 128:2:8; prefill and decode; torch.compile and CUDA-graph
# checks) with its kernels compiled in parallel first, then nm_simt's GPU tests (after the N:M vector change).
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/llama_simt_h100.sh
source benchmarks/device_env.sh
bash benchmarks/llama_block_h100.sh
timeout 150 python3 -m pytest -m gpu -q tests/test_gpu_nm_simt.py 2>&1 | tee "$OUT/gpu_tests_nm_simt.log" | tail -3

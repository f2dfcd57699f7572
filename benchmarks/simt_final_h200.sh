#!/usr/bin/env bash
# One device call: nm_simt's and dispatch's GPU tests, then issue 6's fp32 acceptance run (NM-SpMM's LLaMA set:
# m in 256..4096 x four (n, k) pairs, 50 / 62.5 / 75 / 87.5 % in both N:M spellings, best of a per-shape sweep).
#   bash .device/on-device.sh bash benchmarks/simt_final_h200.sh
source benchmarks/device_env.sh
timeout 150 python3 -m pytest -m gpu -q tests/test_gpu_nm_simt.py tests/test_dispatch_errors.py 2>&1 \
  | tee "$OUT/gpu_tests_nm_simt.log" | tail -2
timeout 420 python3 benchmarks/bench_nm_simt.py --dtypes f32 --reps 10 --budget-s 360 --out "$OUT/nm_simt.json" 2>&1 \
  | grep -v '^{' | tail -14

#!/usr/bin/env bash
# Issue 6's fp32 acceptance run on the H100 (NM-SpMM's LLaMA set: m in 256..4096 x four (n, k) pairs, 50 / 62.5 /
# 75 / 87.5 % in both N:M spellings, best of a per-shape sweep, cuBLAS SGEMM with TF32 off in the same run). The
# nm_simt GPU tests last ran on the H100 at b35d0d5 (gpu_tests_nm_simt.log); nm_simt has not changed since.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/simt_final_h100.sh
source benchmarks/device_env.sh
timeout 570 python3 benchmarks/bench_nm_simt.py --dtypes f32 --reps 10 --budget-s 480 --out "$OUT/nm_simt.json" 2>&1 \
  | grep -v '^{' | tail -14

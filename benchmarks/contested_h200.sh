#!/usr/bin/env bash
# One device call: nm_simt's and dispatch's GPU tests, then 2:4 on the shapes where sptc24_sm90 trailed cuSPARSELt
# (8192^3, 2048x11008x4096, 2048x12288x4096, 16384x4096x4096): the focused sm90 grid (10 kernels, 90 points)
# against cuBLAS and cuSPARSELt after mm_search, timed in the same run.
#   bash .device/on-device.sh bash benchmarks/contested_h200.sh
source benchmarks/device_env.sh
timeout 150 python3 -m pytest -m gpu -q tests/test_gpu_nm_simt.py tests/test_dispatch_errors.py 2>&1 \
  | tee "$OUT/gpu_tests_nm_simt.log" | tail -2
timeout 400 python3 benchmarks/bench_sptc24.py --preset contested --sweep --grid focused --families sptc24_sm90 \
  --reps 50 --out "$OUT/sptc24_contested.json" 2>&1 | grep -v '^{' | tail -25

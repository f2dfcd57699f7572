#!/usr/bin/env bash
# Issue 6 on the H100: nm_simt with TMA-filled stages (tma = 1). First the nm_simt GPU tests that run tma and compact
# configs (fp64 references, tails, vectors 1-32, fp16/bf16, split-K, NaN-poisoned outputs), then, only if they pass,
# issue 6's fp32 acceptance bench with tma variants in its sweep, then Nsight Compute on the 87.5 % profile config
# with and without TMA (instruction counts and stalls).
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/simt_tma_h100.sh
source benchmarks/device_env.sh
timeout 240 python3 -m pytest -q -m gpu tests/test_gpu_nm_simt.py -k "tma or compact or configs_fp32" -p no:cacheprovider \
  2>&1 | tee "$OUT/gpu_tests_nm_simt_tma.log" | tail -4
grep -q " passed" "$OUT/gpu_tests_nm_simt_tma.log" && ! grep -q "failed\|error" "$OUT/gpu_tests_nm_simt_tma.log" \
  || { echo "GPU tests did not pass: no bench"; exit 1; }
timeout 240 python3 benchmarks/bench_nm_simt.py --dtypes f32 --reps 10 --budget-s 200 --out "$OUT/nm_simt.json" 2>&1 \
  | grep -v '^{' | tail -14
PATTERN=4:32 CONFIGS='{"block_rows": 256, "block_tokens": 64, "k_cols": 64, "stages": 3, "x_transposed": 1, "tma": 1}' \
  timeout 100 bash benchmarks/profile_nm_simt.sh 2>&1 | grep -v sgemm | head -14

#!/usr/bin/env bash
# Issue 6 on the H100: nm_simt's compact k-tiles (compact = 1: only the x^T rows a CTA's rows use, so a k-tile
# holds 2-3x more kept steps at 87.5 %). First the nm_simt GPU tests that run compact configs (fp64 references,
# tails, fp16/bf16, split-K, NaN-poisoned outputs), then, only if they pass, issue 6's fp32 acceptance bench with
# the compact configs in its sweep (every config's time is in the JSON's `sweep` lists).
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/simt_compact_h100.sh
source benchmarks/device_env.sh
timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_nm_simt.py -k "compact or configs_fp32" -p no:cacheprovider \
  2>&1 | tee "$OUT/gpu_tests_nm_simt_compact.log" | tail -4
grep -q " passed" "$OUT/gpu_tests_nm_simt_compact.log" && ! grep -q "failed\|error" "$OUT/gpu_tests_nm_simt_compact.log" \
  || { echo "GPU tests did not pass: no bench"; exit 1; }
timeout 270 python3 benchmarks/bench_nm_simt.py --dtypes f32 --reps 10 --budget-s 230 --out "$OUT/nm_simt.json" 2>&1 \
  | grep -v '^{' | tail -14

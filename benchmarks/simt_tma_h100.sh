#!/usr/bin/env bash
# Issue 6 on the H100: nm_simt. First every nm_simt GPU test (fp64 references, tails, vectors 1-32, fp16/bf16,
# split-K, NaN-poisoned outputs, tma and compact configs, the heuristic's configs), then, only if they pass, issue 6's
# fp32 acceptance bench (per-shape sweep of TMA-filled configs), then Nsight Compute on PROFILE (default: the 87.5 %
# winner at 2048 x 4096², 128 x 256 CTAs of 8 x 16 tiles) with warp-state sampling per SASS instruction.
#   CUTLASS_NM_COMMIT=<sha> [TESTS_K=<pytest -k expression>] bash .device/on-device.sh bash benchmarks/simt_tma_h100.sh
source benchmarks/device_env.sh
PROFILE=${PROFILE:-'{"block_rows": 128, "block_tokens": 256, "thread_tokens": 16, "k_cols": 64, "stages": 3, "x_transposed": 1, "tma": 1}'}
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_nm_simt.py -p no:cacheprovider ${TESTS_K:+-k "$TESTS_K"} \
  2>&1 | tee "$OUT/gpu_tests_nm_simt.log" | tail -4
grep -q " passed" "$OUT/gpu_tests_nm_simt.log" && ! grep -q "failed\|error" "$OUT/gpu_tests_nm_simt.log" \
  || { echo "GPU tests did not pass: no bench"; exit 1; }
timeout 260 python3 benchmarks/bench_nm_simt.py --dtypes f32 --reps 10 --budget-s 200 --out "$OUT/nm_simt.json" 2>&1 \
  | grep -v '^{' | tail -14
gpu_clocks_summary
PATTERN=4:32 CONFIGS="$PROFILE" SASS=1 timeout 120 bash benchmarks/profile_nm_simt.sh 2>&1 | grep -v sgemm | head -60

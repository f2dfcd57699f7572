#!/usr/bin/env bash
# Issue 6: nm_simt's template against an earlier one (.device/base_nm_simt.cu, from `git show REV:cutlass_nm/codegen/
# templates/nm_simt.cu`), same configs, same run, or (AB_ARGS="--challengers kwarps|tail") new configs against the
# winners: every nm_simt GPU test at the current template first (TESTS, or SKIP_TESTS=1), then benchmarks/ab_nm_simt.py
# over the winners of the 842990c acceptance sweep (WINNERS, PATTERNS, TOKENS).
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/simt_ab_h100.sh   (carry .device)
source benchmarks/device_env.sh
TAG=${TEST_TAG:-ab}_${CUTLASS_NM_COMMIT:0:7}
if [ -z "${SKIP_TESTS:-}" ]; then
  python3 benchmarks/precompile_tests.py test_gpu_nm_simt
  gpu_tests "${TESTS:-tests/test_gpu_nm_simt.py}" "gpu_tests_nm_simt_$TAG.log" "${TEST_TIMEOUT:-240}"
fi
R=benchmarks/results/h100
timeout "${AB_TIMEOUT:-420}" python3 benchmarks/ab_nm_simt.py ${AB_ARGS:---base-template .device/base_nm_simt.cu} \
  --winners "${WINNERS:-$R/nm_simt_plain_16_32_2_4_842990c.json,$R/nm_simt_plain_12_32_8_32_1_4_2_8_842990c.json,$R/nm_simt_plain_4_32_1_8_842990c.json}" \
  --patterns "${PATTERNS:-16:32,12:32,8:32,4:32}" --tokens "${TOKENS:-256,512,2048}" --rounds "${ROUNDS:-3}" \
  --out "$OUT/ab_nm_simt_$TAG.json"
gpu_clocks_summary

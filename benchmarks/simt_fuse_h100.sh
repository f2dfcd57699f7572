#!/usr/bin/env bash
# Issue 6, nm_simt with fuse_x (x transposed inside the GEMM by the producer warpgroup), first run 2026-11-26 (NOTES:
# "Outcome of fuse_x"): every nm_simt GPU test (the template changed for all configs; SKIP_TESTS=1 skips them), then,
# if they pass, the fp32 acceptance sweep with each TMA config beside its fuse_x twin, every ratio against SGEMM (TF32
# off) in the same run. PATTERNS (default: all eight of the acceptance set) and BUDGET_S (sweep seconds, default 240)
# split the set over calls that fit the device's 600 s; BENCH_ARGS pass more (e.g. "--winners --tokens 256,2048").
# Build the kernels here first (nvcc, no GPU), carry them:
#   export CUTLASS_NM_CACHE=$PWD/.kcache CUTLASS_NM_DB=off
#   python3 benchmarks/precompile_tests.py test_gpu_nm_simt
#   python3 benchmarks/bench_nm_simt.py --precompile --fuse --dtypes f32
#   (cd .kcache/kernels && tar -cf - *.so | xz -T2 > ../../.device/kcache.tar.xz)
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/simt_fuse_h100.sh   (carry .device)
source benchmarks/device_env.sh
mkdir -p "$CUTLASS_NM_CACHE/kernels" && tar -xJf .device/kcache.tar.xz -C "$CUTLASS_NM_CACHE/kernels"
sha=${CUTLASS_NM_COMMIT:0:7}
# TESTS (default: the whole module) and TEST_TIMEOUT (default 240 s) narrow the test step
[ "${SKIP_TESTS:-0}" = 1 ] ||
  gpu_tests "${TESTS:-tests/test_gpu_nm_simt.py}" "gpu_tests_nm_simt_fuse_$sha.log" "${TEST_TIMEOUT:-240}"
budget=${BUDGET_S:-240}
# FUSE= (empty) times the plain configs only: the acceptance sweep without the fused twins
tag=fuse && [ -z "${FUSE---fuse}" ] && tag=plain
timeout $((budget + 60)) python3 benchmarks/bench_nm_simt.py ${FUSE---fuse} --dtypes f32 --reps 10 --budget-s "$budget" \
  ${PATTERNS:+--patterns "$PATTERNS"} ${BENCH_ARGS:-} \
  --out "$OUT/nm_simt_${tag}_${PATTERNS//[:,]/_}_$sha.json" 2>&1 | grep -v '^{' | tail -12
gpu_clocks_summary

#!/usr/bin/env bash
# Issue 6, nm_simt on the H100: GPU tests, then the fp32 acceptance sweep, every ratio against SGEMM (TF32 off) in the
# same run. Used for fuse_x (stop 31, FUSE default: each TMA config beside its fuse_x twin) and for split-K summed in a
# cluster (stop 32, FUSE= : the plain sweep, whose split variants include split_reduce = 2).
#   TESTS (default: the whole module), TEST_TIMEOUT (default 240 s), SKIP_TESTS=1: the test step
#   PATTERNS (default: all eight of the acceptance set), BUDGET_S (sweep seconds, default 240): split the set over
#   calls that fit the device's 600 s; BENCH_ARGS pass more (e.g. "--winners --tokens 256,2048")
# Build the kernels here first (nvcc, no GPU), carry them:
#   export CUTLASS_NM_CACHE=$PWD/.kcache CUTLASS_NM_DB=off
#   python3 benchmarks/precompile_tests.py test_gpu_nm_simt
#   python3 benchmarks/bench_nm_simt.py --precompile --dtypes f32 [--fuse] [--tokens ...]
#   (cd .kcache/kernels && tar -cf - *.so | xz -T2 > ../../.device/kcache.tar.xz)
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/simt_sweep_h100.sh   (carry .device)
source benchmarks/device_env.sh
sha=${CUTLASS_NM_COMMIT:0:7}
# TESTS (default: the whole module) and TEST_TIMEOUT (default 240 s) narrow the test step
[ "${SKIP_TESTS:-0}" = 1 ] ||
  gpu_tests "${TESTS:-tests/test_gpu_nm_simt.py}" "gpu_tests_nm_simt_${TEST_TAG:-sweep}_$sha.log" "${TEST_TIMEOUT:-240}"
budget=${BUDGET_S:-240}
# FUSE= (empty) times the plain configs only: the acceptance sweep without the fused twins
tag=fuse && [ -z "${FUSE---fuse}" ] && tag=plain
timeout $((budget + 60)) python3 benchmarks/bench_nm_simt.py ${FUSE---fuse} --dtypes f32 --reps 10 --budget-s "$budget" \
  ${PATTERNS:+--patterns "$PATTERNS"} ${BENCH_ARGS:-} \
  --out "$OUT/nm_simt_${tag}_${PATTERNS//[:,]/_}_$sha.json" 2>&1 | grep -v '^{' | tail -12
gpu_clocks_summary

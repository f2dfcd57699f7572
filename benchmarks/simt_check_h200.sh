#!/usr/bin/env bash
# One device call: nm_simt's GPU tests, then the same fp32 sweep as simt_block_h200.sh (first pattern of each
# sparsity level, m = 256 and 2048, the four LLaMA (n, k) pairs, every config's time kept).
#   bash .device/on-device.sh bash benchmarks/simt_check_h200.sh [extra bench_nm_simt args]
source benchmarks/device_env.sh
if [ -f .kc/kcache.tar.xz ]; then tar -C "$CUTLASS_NM_CACHE" -xJf .kc/kcache.tar.xz; fi
timeout 200 python3 -m pytest -m gpu -q -x tests/test_gpu_nm_simt.py 2>&1 | tee "$OUT/gpu_tests_nm_simt.log" | tail -4
timeout 330 python3 benchmarks/bench_nm_simt.py --dtypes f32 --patterns 16:32,12:32,8:32,4:32 --tokens 256,2048 \
  --reps 10 --out "$OUT/nm_simt_sweep.json" "$@" 2>&1 | grep -v '^{' | tail -12

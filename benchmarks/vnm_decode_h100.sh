#!/usr/bin/env bash
# Issue 6: V:N:M decode on sparse tensor cores (nm_decode mode 3): its GPU tests, then (if they pass) the comparison
# against mode 0, the dispatch default and cuBLAS (bench_vnm_decode.py).
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/vnm_decode_h100.sh
source benchmarks/device_env.sh
timeout 150 python3 benchmarks/precompile_decode_tests.py 2>&1 | tail -2
timeout 120 python3 -m pytest -m gpu -q -x tests/test_gpu_nm_decode.py -k "mode3" 2>&1 \
  | tee "$OUT/gpu_tests_nm_decode_mode3.log" | tail -15
if grep -q " passed" "$OUT/gpu_tests_nm_decode_mode3.log" && ! grep -q "failed" "$OUT/gpu_tests_nm_decode_mode3.log"; then
  timeout 280 python3 benchmarks/bench_vnm_decode.py --out "$OUT/vnm_decode.json" 2>&1 | tail -30
fi

#!/usr/bin/env bash
# Issue 6, after the launch sweep (decode_launch_h100.sh): every decode GPU test, then (second call, BENCH=1) the
# acceptance benchmark with the heuristic (mode 2: 8 warps, bulk below 2^25 weights; every mode with PDL), each PDL
# row timed again without it.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/decode_pdl_h100.sh
#   CUTLASS_NM_COMMIT=<sha> BENCH=1 bash .device/on-device.sh bash benchmarks/decode_pdl_h100.sh
source benchmarks/device_env.sh
if [ "${BENCH:-0}" = 1 ]; then
  timeout 560 python3 benchmarks/bench_nm_decode.py --vector 32 --tokens 1,4,16 --out "$OUT/nm_decode_v32.json" 2>&1 \
    | grep -v '^{' | tail -3
else
  timeout 90 python3 benchmarks/precompile_gpu_tests.py --families nm_decode --tokens 1,2,3,4,5,13,16 --f32-out 2>&1 \
    | tail -1
  timeout 120 python3 benchmarks/precompile_decode_tests.py 2>&1 | tail -1
  timeout 240 python3 -m pytest -m gpu -q tests/test_gpu_nm_decode.py 2>&1 | tee "$OUT/gpu_tests_nm_decode.log" | tail -2
fi

#!/usr/bin/env bash
# The decode path's acceptance run (issue 6): the heuristic (tensor cores at vector = 32) on every pattern at
# m = 1, 4, 16 against cuBLAS fp16 and the measured copy bandwidth, after every decode GPU test.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/decode_final_h100.sh
source benchmarks/device_env.sh
timeout 60 python3 benchmarks/precompile_gpu_tests.py --families nm_decode --tokens 1,2,3,4,5,13,16 --f32-out 2>&1 | tail -1
timeout 90 python3 benchmarks/precompile_decode_tests.py 2>&1 | tail -1
timeout 120 python3 -m pytest -m gpu -q tests/test_gpu_nm_decode.py 2>&1 | tee "$OUT/gpu_tests_nm_decode.log" | tail -2
timeout 300 python3 benchmarks/bench_nm_decode.py --vector 32 --tokens 1,4,16 --out "$OUT/nm_decode_v32.json" 2>&1 \
  | grep -v '^{' | tail -3

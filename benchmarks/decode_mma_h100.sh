#!/usr/bin/env bash
# nm_decode modes 1 (one row per lane) and 2 (tensor cores) in one device call:
#   1. the decode GPU tests, all of them (the cluster reduction changed for every mode), kernels built in parallel;
#   2. a sweep of modes 1 and 2 (warps x ahead) at vector = 32 over the decode shapes, with cuBLAS and a same-bytes
#      copy; then the mode 0 heuristic at vector 1 (element-wise N:M) in the same run.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/decode_mma_h100.sh
source benchmarks/device_env.sh
SHAPES=4096x4096,11008x4096,4096x11008,8192x8192
timeout 240 python3 benchmarks/sweep_nm_decode.py --vector 32 --modes 1,2 --shapes $SHAPES --mode-ahead 2,4 \
  --patterns 2:8,16:32 --tokens 1,4,8,16 --warps 4,8,16 --out "$OUT/nm_decode_sweep_modes.json" 2>&1 | grep -v '^{' | tail -5
timeout 60 python3 benchmarks/precompile_decode_tests.py 2>&1 | tail -3
timeout 60 python3 benchmarks/precompile_gpu_tests.py --families nm_decode --tokens 1,2,3,5,16 --f32-out 2>&1 | tail -2
timeout 200 python3 -m pytest -m gpu -q tests/test_gpu_nm_decode.py 2>&1 | tee "$OUT/gpu_tests_nm_decode.log" | tail -3

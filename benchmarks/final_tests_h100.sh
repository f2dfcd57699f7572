#!/usr/bin/env bash
# GPU tests at the session's final code: every decode test (the mode 2 heuristic now runs the vector = 32 cases)
# and vnm_sm90's pipelined-mainloop variant (mma_pipe = 1), kernels built in parallel first.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/final_tests_h100.sh
source benchmarks/device_env.sh
timeout 60 python3 benchmarks/precompile_decode_tests.py 2>&1 | tail -1
timeout 60 python3 benchmarks/precompile_gpu_tests.py --families nm_decode --tokens 1,2,3,5,13,16 --f32-out 2>&1 | tail -1
timeout 120 python3 -m pytest -m gpu -q tests/test_gpu_nm_decode.py 2>&1 | tee "$OUT/gpu_tests_nm_decode.log" | tail -2
timeout 200 python3 -c "
import sys; sys.path.insert(0, 'tests')
from test_gpu_vnm import SM90_CASES, _sm90_variant
from cutlass_nm.kernels import precompile
kids = sorted({_sm90_variant((1, 0, 1, 1), c)[0] for c in SM90_CASES}, key=str)
print(len(kids), 'vnm_sm90 mma_pipe kernels:', [type(r).__name__ for r in precompile(kids)])
" 2>&1 | tail -1
CUTLASS_NM_TEST_PRECOMPILE=0 CUTLASS_NM_TEST_FAMILIES=vnm_sm90 timeout 120 python3 -m pytest -m gpu -q tests/test_gpu_vnm.py -k "sm90_variants and m1" \
  2>&1 | tee "$OUT/gpu_tests_vnm_sm90_mma_pipe.log" | tail -2

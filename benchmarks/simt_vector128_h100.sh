#!/usr/bin/env bash
# Issue 6, nm_simt with one vector a CTA: the compact GPU tests (vectors 8-128, one vector a CTA), the decode
# reference test (vectors 1, 32, 128), then the fp32 acceptance rows of 87.5 % and 75 % at vector 128 (compact
# configs beside the TMA winners), every ratio against SGEMM (TF32 off) in the same run. Kernels from a cache built
# off the GPU:
#   export CUTLASS_NM_CACHE=$PWD/.kcache CUTLASS_NM_DB=off
#   python3 benchmarks/bench_nm_simt.py --precompile --compact --vector 128 --patterns 4:32,8:32,1:8,2:8 --dtypes f32
#   python3 benchmarks/precompile_tests.py test_gpu_nm_simt
#   (cd .kcache/kernels && tar -cf - *.so | xz -T2 > ../../.device/kcache.tar.xz)
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/simt_vector128_h100.sh   (carry .device)
source benchmarks/device_env.sh
mkdir -p "$CUTLASS_NM_CACHE/kernels" && tar -xJf .device/kcache.tar.xz -C "$CUTLASS_NM_CACHE/kernels"
sha=${CUTLASS_NM_COMMIT:0:7}
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_nm_simt.py -k compact \
  tests/test_gpu_nm_decode.py::test_decode_matches_reference 2>&1 | tee "$OUT/gpu_tests_vector128_$sha.log" | tail -4
grep -q " passed" "$OUT/gpu_tests_vector128_$sha.log" && ! grep -q "failed\|error" "$OUT/gpu_tests_vector128_$sha.log" \
  || { echo "GPU tests did not pass: no bench"; exit 1; }
timeout 230 python3 benchmarks/bench_nm_simt.py --compact --vector 128 --patterns 4:32,8:32,1:8,2:8 --dtypes f32 \
  --reps 10 --budget-s 170 --out "$OUT/nm_simt_v128_$sha.json" 2>&1 | grep -v '^{' | tail -8
gpu_clocks_summary

#!/usr/bin/env bash
# One device call: the decode GPU tests at the one-token cluster heuristic, its 8192² acceptance rows (issue 6), and
# V:N:M's sm80 and Hopper-native families side by side on issue 5's six shapes, both heuristics, one run. Kernels
# come from a cache built off the GPU (the precompile commands below, nvcc here), carried as .device/kcache.tar.xz:
#   export CUTLASS_NM_CACHE=$PWD/.kcache CUTLASS_NM_DB=off
#   python3 benchmarks/precompile_gpu_tests.py --families nm_decode --tokens 1,2,3,4,5,13,16 --f32-out
#   python3 benchmarks/precompile_decode_tests.py
#   python3 benchmarks/bench_nm_decode.py --vector 32 --shapes 8192x8192 --tokens 1,4,16 --precompile
#   python3 benchmarks/bench_vnm.py --precompile --families vnm_sm90 vnm_sm80 --sm90-configs --sm80-configs
#   (cd .kcache/kernels && tar -cf - *.so | xz -T2 > ../../.device/kcache.tar.xz)
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/stop30_h100.sh   (carry .device)
source benchmarks/device_env.sh
sha=${CUTLASS_NM_COMMIT:0:7}
gpu_tests tests/test_gpu_nm_decode.py "gpu_tests_nm_decode_$sha.log" 200
timeout 170 python3 benchmarks/bench_nm_decode.py --vector 32 --shapes 8192x8192 --tokens 1,4,16 \
  --out "$OUT/nm_decode_v32_8192_$sha.json" 2>&1 | grep -v '^{' | tail -3
timeout 150 python3 benchmarks/bench_vnm.py --families vnm_sm90 vnm_sm80 --sm90-configs --sm80-configs \
  --out "$OUT/vnm_sm80_vs_sm90_$sha.json" 2>&1 | grep -v '^{' | tail -28
gpu_clocks_summary

#!/usr/bin/env bash
# vnm_sm90 raster = 1 (the heuristics' CTA order from 2026-11-24) on the H100, correctness only: the gated-MLP GPU
# tests (with raster 0 / 1 on partial groups and pre-transposed inputs), then vnm_sm90's heuristic-config tests
# (fp64 references, tails, m = 1, V = 64 twins, bf16 with bias, f32 out) with their kernels built in parallel first.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/vnm_raster_h100.sh
source benchmarks/device_env.sh
BENCH=0 bash benchmarks/gated_mlp_h100.sh || exit 1
timeout 150 python3 benchmarks/precompile_gpu_tests.py --families vnm_sm90 --tokens 1,7,133,300,1024 \
  --dtypes f16,bf16 --f32-out 2>&1 | tail -2
CUTLASS_NM_TEST_FAMILIES=vnm_sm90 CUTLASS_NM_TEST_PRECOMPILE=0 timeout 200 python3 -m pytest -q -m gpu \
  tests/test_gpu_vnm.py -k "not variants" -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests_vnm_sm90_raster.log" | tail -4

#!/usr/bin/env bash
# nm_decode modes 1 (one row per lane) and 2 (tensor cores) in one device call:
#   1. their GPU tests;
#   2. a sweep of both (warps x ahead) at vector = 32 over the decode shapes, with cuBLAS and a same-bytes copy.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/decode_mma_h100.sh
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache" CUTLASS_NM_DB=off
mkdir -p "$CUTLASS_NM_CACHE"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv,noheader
timeout 150 python3 -m pytest -m gpu -q -x tests/test_gpu_nm_decode.py -k "(mode2 and w4a4) or refuses" 2>&1 | tee "$OUT/gpu_tests_nm_decode_modes.log" | tail -3
timeout 240 python3 benchmarks/sweep_nm_decode.py --vector 32 --modes 1,2 --shapes 4096x4096,11008x4096,4096x11008,8192x8192 \
  --patterns 2:8,16:32 --tokens 1,4,8,16 --warps 2,4,8,16 --out "$OUT/nm_decode_sweep_modes.json" 2>&1 | grep -v '^{' | tail -5

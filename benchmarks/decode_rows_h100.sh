#!/usr/bin/env bash
# nm_decode's lane_rows kernel (one row per lane, x reads broadcast when 32 rows share indices) in one device call:
#   1. the decode GPU tests (lane_rows variants among them);
#   2. a lane_rows sweep (warps x ahead) at vector = 32 over the decode shapes, with cuBLAS and a same-bytes copy;
#   3. the current heuristic (lanes along k) at vector = 32 and 1 in the same run, for the side by side.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/decode_rows_h100.sh
source benchmarks/device_env.sh
timeout 240 python3 -m pytest -m gpu -q tests/test_gpu_nm_decode.py 2>&1 | tee "$OUT/gpu_tests_nm_decode.log" | tail -3
SHAPES=4096x4096,11008x4096,4096x11008,8192x8192
timeout 200 python3 benchmarks/sweep_nm_decode.py --vector 32 --lane-rows 1 --shapes $SHAPES --patterns 2:8,16:32 \
  --tokens 1,4,8,16 --out "$OUT/nm_decode_sweep_lane_rows.json" 2>&1 | cut -c1-300 | tail -40
for v in 32 1; do
  timeout 100 python3 benchmarks/bench_nm_decode.py --vector $v --shapes $SHAPES --tokens 1,4,16 --patterns 2:8,16:32,1:8,3:7 \
    --out "$OUT/nm_decode_heuristic_v$v.json" 2>&1 | grep -v '^{' | tail -3
done

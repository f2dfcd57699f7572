#!/usr/bin/env bash
# One device call for vnm_sm80: its GPU tests, then vnm_sm80 and vnm_sm90 side by side against cuBLAS (same run).
#   bash .device/on-device.sh bash benchmarks/vnm_sm80_device_check.sh   (CUTLASS_NM_COMMIT=<hash> in front)
# About 4 minutes on the H100 from a cold kernel cache (the sm90 kernel's compile dominates).
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache" CUTLASS_NM_DB=off
mkdir -p "$CUTLASS_NM_CACHE" "$OUT"
CUTLASS_NM_TEST_FAMILIES=vnm_sm80 timeout 90 python3 -m pytest -m gpu -q --maxfail=5 -k vnm_sm80 \
  tests/test_gpu_vnm_sm80.py tests/test_gpu_vnm.py 2>&1 | tee "$OUT/vnm_sm80_gpu_tests.log" | tail -6
timeout 240 python3 benchmarks/bench_vnm.py --families vnm_sm80 vnm_sm90 --sm80-configs 128x128x64x64x64x4x1 \
  --sm90-configs 128x256x64x5x2 --out "$OUT/vnm_sm80_vs_sm90.json" 2>&1 | tee "$OUT/vnm_sm80_vs_sm90.log" | tail -3
python3 benchmarks/report_vnm_families.py "$OUT/vnm_sm80_vs_sm90.json"

#!/usr/bin/env bash
# One device call for vnm_sm90: smoke (layout check), GPU tests, then the benchmark (args go to bench_vnm.py).
#   bash .device/on-device.sh bash benchmarks/vnm_device_check.sh [--shapes N ...]
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache"
mkdir -p "$CUTLASS_NM_CACHE" "$OUT"
timeout 200 python3 benchmarks/smoke_vnm.py 2>&1 | tee "$OUT/vnm_smoke.log"
if grep -q "rel_err=[0-9.e-]*" "$OUT/vnm_smoke.log" && ! grep -q "bad tokens" "$OUT/vnm_smoke.log"; then
  timeout 300 python3 -m pytest -m gpu -q -x tests/test_gpu_vnm.py 2>&1 | tee "$OUT/vnm_gpu_tests.log" | tail -15
  timeout 400 python3 benchmarks/bench_vnm.py --out "$OUT/vnm.json" "$@" 2>&1 | tee "$OUT/vnm_bench.log" | tail -40
fi
ls -la "$OUT"

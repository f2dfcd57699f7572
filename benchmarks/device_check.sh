#!/usr/bin/env bash
# One device call: GPU correctness tests, then the 2:4 benchmark; the kernel cache comes back as
# kcache.tar.xz.part-* (cat them, untar into .kcache/) so the next call can carry it instead of recompiling.
#   bash .device/on-device.sh bash benchmarks/device_check.sh [bench args...]
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache"
mkdir -p "$CUTLASS_NM_CACHE" "$OUT"
python3 -m pytest -m gpu -q tests/test_gpu_sptc24.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
python3 benchmarks/smoke_sptc24.py 2>&1 | tee "$OUT/smoke.log"
if [ "$#" -gt 0 ]; then
  python3 benchmarks/bench_sptc24.py "$@" 2>&1 | tee "$OUT/bench.log"
fi
tar -C "$CUTLASS_NM_CACHE" -cJ --exclude='*.lock' . 2>/dev/null | split -b 15M - "$OUT/kcache.tar.xz.part-"
ls -la "$OUT"

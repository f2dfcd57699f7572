#!/usr/bin/env bash
# One device call (< 300 s) for vnm_sm90's speed work: the GPU tests of the transpose / gather variants, the per-call
# transpose alone (both variants, exactness on tails), where the kernel's time goes at 4096^3 (TMA gather), then the
# bench of the original config, the swizzled transpose, and the swizzled transpose + TMA gather.
#   bash .device/on-device.sh bash benchmarks/vnm_speed_check.sh [bench_vnm.py args]
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache"
mkdir -p "$CUTLASS_NM_CACHE" "$OUT"
command -v ncu || echo "no ncu"
CUTLASS_NM_TEST_FAMILIES=vnm_sm90 timeout 130 python3 -m pytest -m gpu -q -x tests/test_gpu_vnm.py -k sm90_variants \
  2>&1 | tee "$OUT/vnm_variants.log" | tail -5
for p in 128:2:8 128:2:16; do
  timeout 45 python3 benchmarks/profile_vnm.py --pattern "$p" 2>&1 | tee -a "$OUT/vnm_profile.log"
done
timeout 110 python3 benchmarks/bench_vnm.py --families vnm_sm90 --sm90-configs 128x256x64x5x2 128x256x64x5x2x1 \
  128x256x64x5x2x1x1 --out "$OUT/vnm.json" "$@" 2>&1 | tee "$OUT/vnm_bench.log" | tail -20

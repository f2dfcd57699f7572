#!/usr/bin/env bash
# One device call after the batched producer became vnm_sm90's heuristic: the V:N:M GPU tests of the Hopper family
# (fp64 reference, poisoned outputs, tails, m = 1, M = 7/10/16, V = 64 twins, bf16 + bias, the opt-in variants), then
# small-m rows of both V:N:M families against cuBLAS in one run. Carry .kcache to skip earlier compiles.
#   bash .device/on-device.sh bash benchmarks/vnm_h200_check.sh
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache"
mkdir -p "$CUTLASS_NM_CACHE" "$OUT"
CUTLASS_NM_TEST_FAMILIES=vnm_sm90 timeout 330 python3 -m pytest -m gpu -q tests/test_gpu_vnm.py 2>&1 \
  | tee "$OUT/gpu_tests_vnm_sm90.log" | tail -6
timeout 200 python3 benchmarks/bench_vnm.py --families vnm_sm90 vnm_sm80 --mnk 16x4096x4096 16x11008x4096 \
  64x4096x4096 256x4096x4096 256x11008x4096 --sm90-configs 64x64x128x6x1x1x0x0 64x64x128x6x1x1x0x1 \
  128x128x64x8x2x1x0x1 128x256x64x5x2x1x0x1 --sm80-configs 64x64x128x32x32x4 128x128x64x64x64x4 \
  --out "$OUT/vnm_small_m.json" 2>&1 | tee "$OUT/vnm_small_m.log" | grep -v '^{' | tail -16
tar -C "$CUTLASS_NM_CACHE" -cJ --exclude='*.lock' . 2>/dev/null | split -b 15M - "$OUT/kcache.tar.xz.part-"

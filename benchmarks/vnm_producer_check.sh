#!/usr/bin/env bash
# One device call for vnm_sm90's batched producer (producer=1): bench_vnm of the previous best sm90 config
# (128x256x64, 5 stages, 2 consumers, swizzled transpose, one-row-at-a-time producer) against producer=1 configs and
# vnm_sm80's heuristic config, all in one run (cuBLAS timed per row); every row's output is poisoned and checked
# against fp64. The kernel cache comes back as kcache.tar.xz.part-* (see benchmarks/README.md).
#   bash .device/on-device.sh bash benchmarks/vnm_producer_check.sh [bench_vnm.py args]
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache"
mkdir -p "$CUTLASS_NM_CACHE" "$OUT"
if [ -f .kc/kcache.tar.xz ]; then tar -C "$CUTLASS_NM_CACHE" -xJf .kc/kcache.tar.xz; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv
timeout 520 python3 benchmarks/bench_vnm.py --families vnm_sm90 vnm_sm80 \
  --sm90-configs 128x256x64x5x2x1x0x0 128x256x64x5x2x1x0x1 128x256x64x4x2x1x0x1 128x128x64x8x2x1x0x1 \
  128x128x128x4x2x1x0x1 --sm80-configs 128x128x64x64x64x4 --out "$OUT/vnm_producer.json" "$@" 2>&1 \
  | tee "$OUT/vnm_producer.log" | grep -v '^{' | tail -40
tar -C "$CUTLASS_NM_CACHE" -cJ --exclude='*.lock' . 2>/dev/null | split -b 15M - "$OUT/kcache.tar.xz.part-"

#!/usr/bin/env bash
# One device call: L2 / HBM read bandwidth, and what cuSPARSELt (after mm_search) launches on the 2:4 shapes where
# sptc24_sm90 trails or ties it (kernel names, grid, cluster, shared memory, registers; power and SM clock over a
# one-second loop), next to our two best configs there.
#   bash .device/on-device.sh bash benchmarks/gap_h100.sh      (carry .kcache to reuse kernels compiled elsewhere)
source benchmarks/device_env.sh
timeout 120 python3 benchmarks/probe_l2_bandwidth.py --out "$OUT/l2_bandwidth.json" 2>&1 | tail -4
C1='{"tile_m": 256, "tile_n": 128, "tile_k": 128, "cluster_m": 1, "cluster_n": 1}'
C2='{"tile_m": 256, "tile_n": 128, "tile_k": 128, "cluster_m": 1, "cluster_n": 2}'
for s in 8192x8192x8192 16384x4096x4096 2048x11008x4096 4096x4096x4096; do
  timeout 150 python3 benchmarks/inspect_kernels.py --shapes $s --config "$C1" --config "$C2" \
    --out "$OUT/kernels_$s.json" 2>&1 | grep -v Warning
done

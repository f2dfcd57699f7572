#!/usr/bin/env bash
# Issue 6: where a small nm_simt call's time goes (torch.profiler, device µs per call of each kernel) at 256 x 4096²,
# the shape class furthest from the target (8:32 69 %, 4:32 51 % of ideal at f1a17b1), for the f1a17b1 winners
# (split-K by atomics) with the x transpose kernel and with fuse_x (stop 31), or another field of the config: VARY
# (default fuse_x) takes each of VALUES (default "0 1"), e.g. VARY=split_reduce VALUES="1 2" (stop 32: atomics against
# the cluster's sum). Kernels carried (built here).
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/simt_small_h100.sh   (carry .device)
source benchmarks/device_env.sh
[ -d "$CUTLASS_NM_CACHE/kernels" ] || { mkdir -p "$CUTLASS_NM_CACHE/kernels" &&
  tar -xJf .device/kcache.tar.xz -C "$CUTLASS_NM_CACHE/kernels"; }
T='"block_rows": 128, "block_tokens": 256, "thread_tokens": 16, "k_cols": 64, "stages": 3, "x_transposed": 1, "tma": 1'
for case in "8:32|$T, \"split_k\": 4, \"split_reduce\": 1" "4:32|$T, \"split_k\": 2, \"split_reduce\": 1"; do
  for value in ${VALUES:-0 1}; do  # a repeated JSON key: the last one counts
    timeout 60 python3 benchmarks/profile_nm_simt.py --mnk 256x4096x4096 --pattern "${case%%|*}" \
      --config "{${case#*|}, \"${VARY:-fuse_x}\": $value}" --breakdown 20 | tee -a "$OUT/nm_simt_small_${CUTLASS_NM_COMMIT:0:7}.jsonl"
  done
done

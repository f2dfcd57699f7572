#!/usr/bin/env bash
# Issue 6: where an nm_simt CTA's fixed cost goes (trace_nm_simt.py: per-tile pipeline stamps and per-CTA entry / exit)
# at 8:32 and 4:32, 256 x 4096² (the f1a17b1 winners, split-K by atomics) against 2048 x 4096² (no split). The traced
# kernels are built here (CNM_TRACE sources) and carried:
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/simt_trace_h100.sh   (carry .device)
source benchmarks/device_env.sh
mkdir -p "$CUTLASS_NM_CACHE/kernels" && tar -xJf .device/kcache.tar.xz -C "$CUTLASS_NM_CACHE/kernels"
T='"block_rows": 128, "block_tokens": 256, "thread_tokens": 16, "k_cols": 64, "stages": 3, "x_transposed": 1, "tma": 1'
out="$OUT/nm_simt_trace_${CUTLASS_NM_COMMIT:0:7}"
timeout 90 python3 benchmarks/trace_nm_simt.py --mnk 256x4096x4096 --pattern 8:32 \
  --configs "{$T, \"split_k\": 4, \"split_reduce\": 1}" --out "${out}_small_8_32.json"
timeout 90 python3 benchmarks/trace_nm_simt.py --mnk 256x4096x4096 --pattern 4:32 \
  --configs "{$T, \"split_k\": 2, \"split_reduce\": 1}" --out "${out}_small_4_32.json"
timeout 90 python3 benchmarks/trace_nm_simt.py --mnk 2048x4096x4096 --pattern 8:32 --configs "{$T}" \
  --out "${out}_large_8_32.json"

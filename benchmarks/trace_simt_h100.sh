#!/usr/bin/env bash
# nm_simt's TMA pipeline per k-tile (a CNM_TRACE build): issue-to-ready latency, lookahead, warp 1's wait and the
# compute time per tile, for the 87.5 % winner and two other tiles at 2048 x 4096², 4:32.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/trace_simt_h100.sh
source benchmarks/device_env.sh
T='"x_transposed": 1, "tma": 1'
timeout 400 python3 benchmarks/trace_nm_simt.py --mnk 2048x4096x4096 --pattern 4:32 --out "$OUT/nm_simt_trace.json" \
  --configs "{\"block_rows\": 128, \"block_tokens\": 256, \"thread_tokens\": 16, \"k_cols\": 64, \"stages\": 3, $T}|{\"block_rows\": 256, \"block_tokens\": 128, \"thread_rows\": 16, \"k_cols\": 64, \"stages\": 3, $T}|{\"block_rows\": 256, \"block_tokens\": 64, \"k_cols\": 64, \"stages\": 3, $T}"

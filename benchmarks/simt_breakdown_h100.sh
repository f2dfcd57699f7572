#!/usr/bin/env bash
# Issue 6: where an nm_simt call's time goes (torch.profiler: x transpose, GEMM kernel, memsets) at 2048 x 4096²,
# for the f1a17b1 sweep winners at 87.5 % (4:32) and 50 % (16:32), beside cuBLAS SGEMM. Kernels carried (built here).
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/simt_breakdown_h100.sh   (carry .device)
source benchmarks/device_env.sh
mkdir -p "$CUTLASS_NM_CACHE/kernels" && tar -xJf .device/kcache.tar.xz -C "$CUTLASS_NM_CACHE/kernels"
W87='{"block_rows": 128, "block_tokens": 256, "thread_tokens": 16, "k_cols": 64, "stages": 3, "x_transposed": 1, "tma": 1}'
W50='{"block_rows": 256, "block_tokens": 128, "thread_rows": 16, "k_cols": 64, "stages": 3, "x_transposed": 1, "tma": 1}'
for case in "4:32|$W87" "16:32|$W50" "8:32|$W87"; do
  timeout 60 python3 benchmarks/profile_nm_simt.py --mnk 2048x4096x4096 --pattern "${case%%|*}" \
    --config "${case#*|}" --breakdown 20 | tee -a "$OUT/nm_simt_breakdown_${CUTLASS_NM_COMMIT:0:7}.jsonl"
done

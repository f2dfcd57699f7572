#!/usr/bin/env bash
# Nsight Compute on nm_simt configs (MNK, default 2048x4096x4096; PATTERN, default 16:32) and on cuBLAS SGEMM of
# 2048 x 4096 x 4096, with each warp-stall reason per issued instruction.
#   bash .device/on-device.sh bash benchmarks/profile_nm_simt.sh
#   PATTERN=4:32 CONFIGS='{"block_rows": 256, ...}|{...}' bash .device/on-device.sh bash benchmarks/profile_nm_simt.sh
source benchmarks/device_env.sh
PATTERN=${PATTERN:-16:32}
MNK=${MNK:-2048x4096x4096}
CONFIGS=${CONFIGS:-'{"x_transposed": 1}|{"block_rows": 256, "block_tokens": 128, "thread_rows": 16, "k_cols": 64, "stages": 2, "x_transposed": 1}'}
S="--section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section SchedulerStats --section Occupancy --section InstructionStats"
STALLS="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
IFS='|' read -ra CFGS <<< "$CONFIGS"
for cfg in "${CFGS[@]}"; do
  name=$(echo "$PATTERN$cfg" | tr -dc '0-9a-z_' | head -c 60)
  timeout 150 ncu --clock-control none -k regex:nm_simt_kernel --launch-skip 2 --launch-count 1 $S $STALLS \
    python3 benchmarks/profile_nm_simt.py --mnk "$MNK" --pattern "$PATTERN" --config "$cfg" \
    > "$OUT/ncu_nm_simt_$name.txt" 2>&1
  echo "== $PATTERN $cfg"
  grep -E "Duration|Issue Slots Busy|Executed Ipc A|FMA|Registers Per|Achieved Occ|Block Limit (Reg|Shared)|L2 Cache Throughput|Mem Pipes|stalled_.*ratio +[0-9.]+$" "$OUT/ncu_nm_simt_$name.txt" \
    | awk '{ if ($0 ~ /stalled/) { if ($NF + 0 >= 0.3) print } else print }' | head -40
done
timeout 100 ncu --clock-control none --launch-skip 2 --launch-count 1 $S python3 -c "
import torch
torch.backends.cuda.matmul.allow_tf32 = False
a, b = torch.randn(2048, 4096, device='cuda'), torch.randn(4096, 4096, device='cuda')
for _ in range(4): torch.mm(a, b)
torch.cuda.synchronize()" > "$OUT/ncu_sgemm.txt" 2>&1
grep -E "gemm|Duration|Issue Slots Busy|Executed Ipc A|FMA|Registers Per|Achieved Occ|Shared" "$OUT/ncu_sgemm.txt" | head -30
# SASS=1: every config again with warp-state sampling per SASS instruction (most-sampled instructions, and the
# whole kernel's SASS with each instruction's samples by stall reason in $OUT/ncu_nm_simt_sass_<config>.csv)
if [ "${SASS:-0}" = 1 ]; then
  for cfg in "${CFGS[@]}"; do
    name=$(echo "$PATTERN$cfg" | tr -dc '0-9a-z_' | head -c 60)
    timeout 150 ncu --clock-control none -k regex:nm_simt_kernel --launch-skip 2 --launch-count 1 \
      --section WarpStateStats --section SourceCounters -o "$OUT/nm_simt_sass" -f \
      python3 benchmarks/profile_nm_simt.py --mnk "$MNK" --pattern "$PATTERN" --config "$cfg" > /dev/null 2>&1
    ncu -i "$OUT/nm_simt_sass.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_nm_simt_sass_$name.csv" 2>&1
    echo "== SASS $PATTERN $cfg"
    python3 benchmarks/ncu_sass_top.py "$OUT/ncu_nm_simt_sass_$name.csv" --top 12
  done
  rm -f "$OUT/nm_simt_sass.ncu-rep"
fi

#!/usr/bin/env bash
# Issue 6, stop 32: why split 2's cluster sums (split_reduce = 2) lost 5-12 % on 256 x 128 CTAs of 16 x 8 tiles (16:32)
# and won on 128 x 256 CTAs of 8 x 16 tiles (4:32), 512-token rows (NOTES: "Outcome (63a8153)"). Nsight Compute on each
# kernel with atomics (split_reduce = 1) and with the cluster's sums (2), then each call's kernels (torch.profiler).
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/profile_cluster_h100.sh   (carry .device)
source benchmarks/device_env.sh
sha=${CUTLASS_NM_COMMIT:0:7}
WIDE='"block_rows": 256, "block_tokens": 128, "thread_rows": 16, "k_cols": 64, "stages": 3'
TALL='"block_rows": 128, "block_tokens": 256, "thread_tokens": 16, "k_cols": 64, "stages": 3'
CASES=("16:32|512x4096x11008|$WIDE" "4:32|512x12288x4096|$TALL")
python3 - "${CASES[@]}" <<'PY'  # build the four kernels in parallel first
import json, sys
from cutlass_nm.families import KernelTypes, get_family
from cutlass_nm.kernels import precompile
fam = get_family("nm_simt")
kids = [(fam.name, fam.Config.from_record({**fam.Config().to_record(), **json.loads("{" + case.split("|")[2] + "}"),
                                            "x_transposed": 1, "tma": 1, "split_k": 2, "split_reduce": r}),
         KernelTypes("f32", "f32", False)) for case in sys.argv[1:] for r in (1, 2)]
print([type(a).__name__ for a in precompile(kids)])
PY
for case in "${CASES[@]}"; do
  IFS='|' read -r pattern mnk tile <<< "$case"
  for r in 1 2; do
    cfg="{$tile, \"x_transposed\": 1, \"tma\": 1, \"split_k\": 2, \"split_reduce\": $r}"
    name="ncu_nm_simt_split2_r${r}_${pattern/:/of}_${mnk}_$sha.txt"
    timeout 120 ncu --clock-control none -k regex:nm_simt_kernel --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy \
      --section SchedulerStats --section MemoryWorkloadAnalysis \
      python3 benchmarks/profile_nm_simt.py --mnk "$mnk" --pattern "$pattern" --config "$cfg" > "$OUT/profiles_$name" 2>&1
    grep -E "Duration|Issue Slots Busy|Cluster|Waves Per SM|Achieved Occupancy|L2 Cache Throughput|DRAM Throughput" \
      "$OUT/profiles_$name" | sed "s/^/$pattern r$r: /"
    timeout 60 python3 benchmarks/profile_nm_simt.py --mnk "$mnk" --pattern "$pattern" --config "$cfg" --breakdown 20 \
      | tee -a "$OUT/nm_simt_split2_breakdown_$sha.jsonl" | cut -c1-400
  done
done

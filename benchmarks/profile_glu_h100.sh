#!/usr/bin/env bash
# Where the glu kernel (vnm_glu_sm90, default config, LLaMA-7B gate/up, 2048 tokens, 128:2:8) waits: Nsight Compute
# with warp-state sampling per SASS instruction; prints the throughput summary and the 40 most-sampled instructions.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/profile_glu_h100.sh
source benchmarks/device_env.sh
VARIANT="${VARIANT:-}"
[ -n "$VARIANT" ] || VARIANT='{}'
timeout 240 ncu --clock-control none -k regex:vnm_kernel --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis \
  --section MemoryWorkloadAnalysis_Tables --section LaunchStats --section Occupancy -o "$OUT/glu" -f \
  python3 benchmarks/sweep_glu.py --once "$VARIANT" --m 2048 --patterns 128:2:8 > "$OUT/ncu_glu_log.txt" 2>&1
tail -3 "$OUT/ncu_glu_log.txt"
ncu -i "$OUT/glu.ncu-rep" --page details > "$OUT/ncu_glu_details.txt" 2>&1
grep -E "Duration|Throughput|Busy|Hit Rate|Bank|Registers|Achieved|Stall|Active Warps|Eligible|Issued" "$OUT/ncu_glu_details.txt" | head -50
ncu -i "$OUT/glu.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_glu_sass.csv" 2>&1
python3 benchmarks/ncu_sass_top.py "$OUT/ncu_glu_sass.csv"

#!/usr/bin/env bash
# vnm_glu_sm90 on the H100: a config sweep against the two separate GEMMs it replaces (LLaMA-7B gate/up, 2048 and
# 8192 tokens, 128:2:8 and 128:2:16), then Nsight Compute on the default glu kernel and on vnm_sm90's gate GEMM.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/glu_sweep_h100.sh
source benchmarks/device_env.sh
timeout 330 python3 benchmarks/sweep_glu.py 2>&1 | tee "$OUT/glu_sweep.jsonl" | python3 -c "
import json, sys
for line in sys.stdin:
    if not line.startswith('{'): print(line.rstrip()[:300]); continue
    r = json.loads(line)
    print(r.pop('pattern'), r.pop('m'), 'two %.3f |' % r.pop('two_gemms_ms'), ' '.join('%s %.3f' % (k.replace(' ', ''), v) for k, v in r.items()))
"
S="--section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section SchedulerStats"
STALLS="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
timeout 150 ncu --clock-control none -k regex:vnm_kernel --launch-skip 0 --launch-count 3 $S $STALLS \
  python3 benchmarks/sweep_glu.py --once '{}' --m 2048 --patterns 128:2:8 > "$OUT/ncu_glu.txt" 2>&1
grep -E "vnm_kernel|Duration|Throughput|Busy|Hit Rate|Bank|stalled_.*ratio +[0-9.]+$" "$OUT/ncu_glu.txt" \
  | awk '{ if ($0 ~ /stalled/) { if ($NF + 0 >= 0.3) print } else print }' | head -90

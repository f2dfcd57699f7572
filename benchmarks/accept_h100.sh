#!/usr/bin/env bash
# Issue 4's 2:4 acceptance in one device call (carry .kcache, compiled on the CPU machine):
#   1. the 2:4 GPU tests (the pipelined heuristic configs among them);
#   2. the small-m sweep (m = 16, 64: persistent and stream-K, both mainloops);
#   3. a fresh tuning DB from this session's sweeps and the earlier H100 runs (db/records_from_bench.py);
#   4. each acceptance shape's DB winner ("tuned") re-timed in a new run with cuBLAS and cuSPARSELt (mm_search);
#   5. V:N:M (vnm_sm90's heuristic config) with CUTLASS's and our consumer mainloop.
#   bash .device/on-device.sh bash benchmarks/accept_h100.sh
source benchmarks/device_env.sh
CUTLASS_NM_TEST_FAMILIES=sptc24_sm90 timeout 150 python3 -m pytest -m gpu -q tests/test_gpu_sptc24.py 2>&1 | tee "$OUT/gpu_tests_sptc24.log" | tail -2
timeout 120 python3 benchmarks/bench_sptc24.py --preset small --sweep --grid small --families sptc24_sm90 --reps 60 \
  --cusparselt cusparselt_search --out "$OUT/sptc24_small.json" 2>&1 | grep -v '^{' | cut -c1-250 | tail -2
R=benchmarks/results/h100
python3 db/records_from_bench.py db/records/h100-80gb-hbm3.env.json $R/sptc24_llm.json $R/sptc24_contested.json \
  $R/sptc24_pipe.json "$OUT/sptc24_small.json" > /tmp/records.jsonl
export CUTLASS_NM_DB=sqlite:////tmp/tuning.sqlite
python3 -m cutlass_nm.cli db import --this-gpu /tmp/records.jsonl 2>&1 | tail -1
timeout 240 python3 benchmarks/bench_sptc24.py --preset accept --tuned --families sptc24_sm90 --reps 100 \
  --cusparselt cusparselt_search,torch_semi_structured --out "$OUT/sptc24_accept.json" 2>&1 | grep -v '^{' \
  | cut -c1-200 | tail -10
CUTLASS_NM_DB=off timeout 150 python3 benchmarks/bench_vnm.py --families vnm_sm90 vnm_sm80 --shapes 2 \
  --sm90-configs 128x256x64x5x2x1x0x1 128x256x64x5x2x1x0x1x1 --out "$OUT/vnm_pipe.json" 2>&1 | grep -v '^{' | tail -8

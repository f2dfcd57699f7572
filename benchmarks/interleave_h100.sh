#!/usr/bin/env bash
# 2:4 tuned / heuristic configs against cuBLAS and cuSPARSELt (mm_search) in interleaved rounds on the acceptance
# shapes, with the shipped H100 records as the tuning DB.   bash .device/on-device.sh bash benchmarks/interleave_h100.sh
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache" CUTLASS_NM_DB=sqlite:////tmp/tuning.sqlite
mkdir -p "$CUTLASS_NM_CACHE"
python3 -m cutlass_nm.cli db import --this-gpu db/records/h100-80gb-hbm3.jsonl 2>&1 | tail -1
timeout 420 python3 benchmarks/interleave_sptc24.py --preset accept --rounds 5 --min-m "${MIN_M:-0}" \
  --out "$OUT/sptc24_interleaved.json" \
  2>&1 | grep -v Warn | tail -12

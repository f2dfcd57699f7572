#!/usr/bin/env bash
# One device call for sptc24_sm90's pipelined mainloop (mma_pipe = 1): the 2:4 GPU tests (pipelined configs among
# them), then the `pipe` grid (CUTLASS's mainloop and ours on the same tiles, clusters and schedulers) on the
# acceptance shapes, against cuBLAS and cuSPARSELt (mm_search) timed in the same run.
#   bash .device/on-device.sh bash benchmarks/pipe_h100.sh   (carry .kcache: kernels compiled on the CPU machine)
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache" CUTLASS_NM_DB=off
mkdir -p "$CUTLASS_NM_CACHE"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv,noheader
timeout 200 python3 -m pytest -m gpu -q tests/test_gpu_sptc24.py 2>&1 | tee "$OUT/gpu_tests_sptc24.log" | tail -3
timeout 360 python3 benchmarks/bench_sptc24.py --preset "${PRESET:-accept}" --sweep --grid pipe \
  --families sptc24_sm90 --reps 50 --out "$OUT/sptc24_pipe.json" 2>&1 | grep -v '^{' | cut -c1-400 | tail -14

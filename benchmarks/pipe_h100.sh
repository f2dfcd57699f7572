#!/usr/bin/env bash
# One device call for sptc24_sm90's pipelined mainloop (mma_pipe = 1): compile what follows on all cores, the 2:4 GPU
# tests (pipelined configs among them), then the `pipe` grid (CUTLASS's mainloop and ours on the same tiles,
# clusters and schedulers) on the acceptance shapes, against cuBLAS and cuSPARSELt (mm_search) timed in the same
# run. The kernel cache comes back as kcache.tar.xz.part-* (benchmarks/README.md).
#   bash .device/on-device.sh bash benchmarks/pipe_h100.sh   (carry .kcache: kernels compiled on the CPU machine)
source benchmarks/device_env.sh
PRESET="${PRESET:-accept}"
python3 benchmarks/bench_sptc24.py --preset "$PRESET" --sweep --grid pipe --families sptc24_sm90 --compile-only &
timeout 420 python3 -m pytest -m gpu -q tests/test_gpu_sptc24.py 2>&1 | tee "$OUT/gpu_tests_sptc24.log" | tail -3
wait
timeout 330 python3 benchmarks/bench_sptc24.py --preset "$PRESET" --sweep --grid pipe --families sptc24_sm90 \
  --reps 40 --cusparselt cusparselt_search --out "$OUT/sptc24_pipe.json" 2>&1 | grep -v '^{' | cut -c1-300 | tail -12
tar -C "$CUTLASS_NM_CACHE" -cJ --exclude='*.lock' --exclude='.*' . 2>/dev/null | split -b 15M - "$OUT/kcache.tar.xz.part-"

#!/usr/bin/env bash
# Issue 5, slot-consistent multicast (vnm_sm90 cluster = 2, 4): one device call.
#   1. build the cluster test kernels and the bench configs in parallel;
#   2. the cluster variants' GPU tests (fp64 reference, tails, padded clusters, V = 64 twin);
#   3. bench_vnm at the acceptance shapes: the heuristic (cp.async, batched producer), the TMA gather alone, and
#      the TMA gather multicast over clusters of 2 and 4, cuBLAS in the same run.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/vnm_multicast_h100.sh
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache" CUTLASS_NM_DB=off
mkdir -p "$CUTLASS_NM_CACHE"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv,noheader
CONFIGS=${CONFIGS:-"128x256x64x5x2x1x0x1 128x256x64x5x2x1x1x0x0x1 128x256x64x5x2x1x1x0x0x2 128x256x64x5x2x1x1x0x0x4 128x256x64x5x2x1x1x0x1x4"}
timeout 240 python3 -c "
import sys; sys.path.insert(0, 'tests'); sys.path.insert(0, 'benchmarks')
from test_gpu_vnm import SM90_CASES, SM90_VARIANTS, _sm90_variant
from bench_vnm import sm90_configs
from cutlass_nm.families import KernelTypes
from cutlass_nm.kernels import precompile
kids = {k for v in SM90_VARIANTS if v[4] > 1 for c in SM90_CASES for k in _sm90_variant(v, c)}
kids |= {('vnm_sm90', c, KernelTypes('f16', 'f16', False)) for c in sm90_configs('$CONFIGS'.split())}
kids = sorted(kids, key=str)
res = precompile(kids)
print(len(kids), 'kernels;', [f'{k[1]}: {r}' for k, r in zip(kids, res) if isinstance(r, Exception)])
" 2>&1 | tail -3
CUTLASS_NM_TEST_PRECOMPILE=0 CUTLASS_NM_TEST_FAMILIES=vnm_sm90 timeout 120 python3 -m pytest -m gpu -q \
  tests/test_gpu_vnm.py -k "sm90_variants and (c2 or c4)" 2>&1 | tee "$OUT/gpu_tests_vnm_sm90_cluster.log" | tail -3
timeout 240 python3 benchmarks/bench_vnm.py --families vnm_sm90 --mnk ${MNK:-4096x4096x4096 8192x8192x8192 2048x11008x4096 2048x4096x11008} \
  --sm90-configs $CONFIGS --out "$OUT/vnm_multicast.json" 2>&1 | grep -v '^{' | tail -12

#!/usr/bin/env bash
# One device call: vnm_sm90's GPU tests again (after a heuristic change), then the LLaMA-7B block (dense vs 2:4 and
# 128:2:8, prefill and decode, compile and CUDA-graph checks) with its kernels compiled in parallel first.
#   bash .device/on-device.sh bash benchmarks/llama_h200_check.sh
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache" CUTLASS_NM_DB=off
mkdir -p "$CUTLASS_NM_CACHE" "$OUT"
if [ -f .kc/kcache.tar.xz ]; then tar -C "$CUTLASS_NM_CACHE" -xJf .kc/kcache.tar.xz; fi
CUTLASS_NM_TEST_FAMILIES=vnm_sm90 timeout 240 python3 -m pytest -m gpu -q tests/test_gpu_vnm.py 2>&1 \
  | tee "$OUT/gpu_tests_vnm_sm90.log" | tail -4
timeout 150 python3 benchmarks/precompile_gpu_tests.py --families sptc24_sm90,nm_decode,vnm_sm90 \
  --tokens 1,4,16,128,2048,8192 --dtypes f16 --bias no 2>&1 | tail -2
timeout 200 python3 benchmarks/bench_llama_block.py --out "$OUT/llama_block.json" 2>&1 | tee "$OUT/llama.log" \
  | python3 -c "
import json, sys
for line in sys.stdin:
    if not line.startswith('{'): print(line.rstrip()); continue
    r = json.loads(line)
    if 'phase' in r: print(r['pattern'], r['phase'], r['batch'], r['tokens'], 'mlp %.2fx block %.2fx diff %.1e' % (r['mlp_speedup'], r['block_speedup'], r['rel_diff_vs_masked_dense']))
    else: print(r)
"
tar -C "$CUTLASS_NM_CACHE" -cJ --exclude='*.lock' . 2>/dev/null | split -b 15M - "$OUT/kcache.tar.xz.part-"

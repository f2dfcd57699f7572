#!/usr/bin/env bash
# One device call: the LLaMA-7B block (dense vs 2:4 and 128:2:8; prefill and decode; torch.compile and CUDA-graph
# checks) with its kernels compiled in parallel first, then nm_simt's GPU tests (after the N:M vector change).
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/llama_simt_h100.sh
source benchmarks/device_env.sh
timeout 150 python3 benchmarks/precompile_gpu_tests.py --families sptc24_sm90,nm_decode,vnm_sm90 \
  --tokens 1,4,16,2048,8192 --dtypes f16 --bias no 2>&1 | tail -2
timeout 220 python3 benchmarks/bench_llama_block.py --out "$OUT/llama_block.json" 2>&1 | tee "$OUT/llama.log" \
  | python3 -c "
import json, sys
for line in sys.stdin:
    if not line.startswith('{'): print(line.rstrip()[:200]); continue
    r = json.loads(line)
    if 'phase' in r: print(r['pattern'], r['phase'], r['batch'], r['tokens'], 'mlp %.2fx block %.2fx diff %.1e' % (r['mlp_speedup'], r['block_speedup'], r['rel_diff_vs_masked_dense']))
    else: print(str(r)[:300])
"
timeout 150 python3 -m pytest -m gpu -q tests/test_gpu_nm_simt.py 2>&1 | tee "$OUT/gpu_tests_nm_simt.log" | tail -3

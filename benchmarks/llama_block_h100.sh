#!/usr/bin/env bash
# Issue 8 on the H100: the LLaMA-7B block (dense vs 2:4 and 128:2:8; prefill and decode at batch 1, 4, 16; the
# output difference against the masked-dense block; torch.compile(fullgraph=True) and CUDA-graph replay against
# eager) with its kernels compiled in parallel first; --breakdown lists each prefill MLP's kernels (torch.profiler).
# (Its run at ebc04ec also ran tests/test_nn.py's GPU test, which ran past its limit compiling an m = 64 kernel.)
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/llama_block_h100.sh
source benchmarks/device_env.sh
timeout 150 python3 benchmarks/precompile_gpu_tests.py --families "${FAMILIES:-sptc24_sm90,nm_decode,vnm_sm90}" \
  --tokens 1,4,16,2048,8192 --dtypes f16 --bias no 2>&1 | tail -2
timeout 420 python3 benchmarks/bench_llama_block.py --patterns "${PATTERNS:-2:4,128:2:8,128:2:8+glu}" --breakdown --out "$OUT/llama_block.json" 2>&1 | tee "$OUT/llama.log" \
  | python3 -c "
import json, sys
for line in sys.stdin:
    if not line.startswith('{'): print(line.rstrip()[:200]); continue
    r = json.loads(line)
    if 'phase' not in r: print(str(r)[:300]); continue
    print(r['pattern'], r['phase'], r['batch'], r['tokens'], 'mlp %.2fx block %.2fx diff %.1e' % (r['mlp_speedup'], r['block_speedup'], r['rel_diff_vs_masked_dense']))
    for side in ('dense', 'sparse'):
        for kr in r.get('mlp_kernels_' + side, [])[:8]: print('   ', side, '%8.1f us x%d' % (kr['us'], kr['launches']), kr['kernel'][:90])
"

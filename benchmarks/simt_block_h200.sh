#!/usr/bin/env bash
# One device call: nm_simt's fp32 sweep (every config's time kept) on the first pattern of each sparsity level at
# m = 256 and 2048 over the four LLaMA (n, k) pairs, while the LLaMA block's kernels compile in the background;
# then the LLaMA-7B block at 128:2:8 (prefill 1 and 4 x 2048, decode 1, 2, 4, 16). Returns the kernel cache.
#   bash .device/on-device.sh bash benchmarks/simt_block_h200.sh
source benchmarks/device_env.sh
if [ -f .kc/kcache.tar.xz ]; then tar -C "$CUTLASS_NM_CACHE" -xJf .kc/kcache.tar.xz; fi
python3 -c "
import sys, torch; sys.path.insert(0, 'benchmarks')
from bench_llama_block import precompile_block
precompile_block(['128:2:8'], (4096, 11008), [2048, 8192, 1, 2, 4, 16], torch.float16)
" > "$OUT/precompile.log" 2>&1 &
bg=$!
timeout 330 python3 benchmarks/bench_nm_simt.py --dtypes f32 --patterns 16:32,12:32,8:32,4:32 --tokens 256,2048 \
  --reps 10 --out "$OUT/nm_simt_sweep.json" 2>&1 | grep -v '^{' | tail -20
wait $bg; tail -2 "$OUT/precompile.log"
timeout 200 python3 benchmarks/bench_llama_block.py --patterns 128:2:8 --decode 1,2,4,16 \
  --out "$OUT/llama_block_128_2_8.json" 2>&1 | grep -v "^cutlass_nm: compiling" | tail -5
python3 -c "
import json
for r in json.load(open('$OUT/llama_block_128_2_8.json'))['rows']:
    print(r['pattern'], r['phase'], r['batch'], r['tokens'], 'mlp %.2fx block %.2fx diff %.1e' % (r['mlp_speedup'], r['block_speedup'], r['rel_diff_vs_masked_dense']))
"
tar -C "$CUTLASS_NM_CACHE" -cf - . | xz -1 -T8 | split -b 15M - "$OUT/kcache.tar.xz.part-"; ls -la "$OUT"

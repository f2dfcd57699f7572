#!/usr/bin/env bash
# One device call: the LLaMA-7B block at 128:2:8 with decode batches 1, 2, 4, 16 (V:N:M routing: decode path at one
# token, vnm_sm90 above), the GPU tests of dispatch and nn, then `cutlass-nm bench --quick` (every family, heuristic
# configs, cuBLAS / SGEMM / cuSPARSELt in the same run) into $OUT/suite/.
#   bash .device/on-device.sh bash benchmarks/final_h200.sh
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache" CUTLASS_NM_DB=off
mkdir -p "$CUTLASS_NM_CACHE" "$OUT/suite"
if [ -f .kc/kcache.tar.xz ]; then tar -C "$CUTLASS_NM_CACHE" -xJf .kc/kcache.tar.xz; fi
timeout 150 python3 benchmarks/bench_llama_block.py --patterns 128:2:8 --decode 1,2,4,16 \
  --out "$OUT/llama_block_128_2_8.json" 2>&1 | grep -v "^cutlass_nm: compiling" | python3 -c "
import json, sys
for line in sys.stdin:
    if not line.startswith('{'): print(line.rstrip()); continue
    r = json.loads(line)
    if 'phase' in r: print(r['pattern'], r['phase'], r['batch'], r['tokens'], 'mlp %.2fx block %.2fx diff %.1e' % (r['mlp_speedup'], r['block_speedup'], r['rel_diff_vs_masked_dense']))
    else: print(r)
"
timeout 120 python3 -m pytest -m gpu -q tests/test_nn.py tests/test_dispatch_errors.py 2>&1 | tee "$OUT/gpu_tests_nn.log" | tail -3
timeout 280 python3 -m cutlass_nm.cli bench --quick --heuristic --out "$OUT/suite" 2>&1 | tee "$OUT/suite.log" | tail -45

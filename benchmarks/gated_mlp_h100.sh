#!/usr/bin/env bash
# Issue 8 on the H100: the fused gate/up SwiGLU kernel (vnm_glu_sm90) and gated_mlp. First their GPU tests (fp64
# references, NaN-poisoned outputs, tails, m = 1-16 through the decode path, fp16/bf16, torch.compile and CUDA-graph
# replay), then, only if they pass, the LLaMA-7B/13B MLP in prefill: dense vs separate vs fused, and the GEMMs alone.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/gated_mlp_h100.sh
source benchmarks/device_env.sh
[ "${TESTS:-1}" = 1 ] && gpu_tests tests/test_gpu_gated_mlp.py gpu_tests_gated_mlp.log 240
[ "${BENCH:-1}" = 1 ] || exit 0
timeout 320 python3 benchmarks/bench_gated_mlp.py --models "${MODELS:-llama-7b}" --out "$OUT/gated_mlp.json" 2>&1 | python3 -c "
import json, sys
for line in sys.stdin:
    if not line.startswith('{'): print(line.rstrip()[:300]); continue
    r = json.loads(line)
    print(r['model'], r['m'], r['pattern'], 'dense %.3f sep %.3f (%.2fx) fused %.3f (%.2fx) | glu %.3f two %.3f (%.2f) down_ht %.3f down %.3f err %.1e' % (
        r['dense_ms'], r['separate_ms'], r['separate_speedup'], r['fused_ms'], r['fused_speedup'], r['glu_ms'],
        r['gate_up_two_ms'], r['glu_over_two_gemms'], r['down_from_ht_ms'], r['down_ms'], r['fused_rel_err_vs_fp32']))
    print('   raster 0 / 1: glu %.3f / %.3f  gate %.3f / %.3f  down %.3f / %.3f' % tuple(
        r['%s_raster%d_ms' % (n, a)] for n in ('glu', 'gate', 'down') for a in (0, 1)))
"

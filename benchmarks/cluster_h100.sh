#!/usr/bin/env bash
# vnm_sm90 / vnm_glu_sm90 `cluster` = 2 (A and E multicast to a CTA pair along the tokens) on the H100: the
# gated-MLP GPU tests (cluster variants included), then the glu kernel's cluster variants against the two separate
# GEMMs (sweep_glu), then, with VNM=1, vnm_sm90 cluster 1 / 2 on issue 5's shapes against cuBLAS (bench_vnm).
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/cluster_h100.sh
source benchmarks/device_env.sh
[ "${TESTS:-1}" = 1 ] && gpu_tests tests/test_gpu_gated_mlp.py gpu_tests_cluster.log 300
if [ "${GLU:-1}" = 1 ]; then
  V='[{}, {"cluster": 2}, {"tile_k": 128, "stages": 3}, {"tile_k": 128, "stages": 3, "cluster": 2}, {"cluster": 2, "raster": 0}, {"cluster": 2, "stages": 5}]'
  timeout 200 python3 benchmarks/sweep_glu.py --variants "$V" 2>&1 | tee "$OUT/glu_cluster.jsonl" | python3 -c "
import json, sys
for line in sys.stdin:
    if not line.startswith('{'): print(line.rstrip()[:300]); continue
    r = json.loads(line)
    print(r.pop('pattern'), r.pop('m'), 'two %.3f |' % r.pop('two_gemms_ms'), ' '.join('%s %.3f' % (k.replace(' ', ''), v) for k, v in r.items()))
"
fi
if [ "${VNM:-0}" = 1 ]; then
  C="128x256x64x5x2x1x0x1x0"
  timeout 280 python3 benchmarks/bench_vnm.py --families vnm_sm90 --shapes "${SHAPES:-6}" --sm90-configs ${C}x0x1 ${C}x0x2 ${C}x1x1 ${C}x1x2 \
    --out "$OUT/vnm_cluster.json" 2>&1 | python3 -c "
import json, sys
for line in sys.stdin:
    if not line.startswith('{'): print(line.rstrip()[:300]); continue
    r = json.loads(line)
    print(r['pattern'], r['m'], r['n'], r['k'], r['kernel'][-12:], '%.4f ms cublas %.4f -> %.2fx err %.1e' % (
        r['median_ms'], r['cublas_ms'], r['speedup_vs_cublas'], r['rel_err']))
"
fi

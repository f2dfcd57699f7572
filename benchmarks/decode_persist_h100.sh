#!/usr/bin/env bash
# Issue 6: the persist decode grid (nm_decode persist = P). Without AB: its GPU tests and the PDL chain's; with
# AB=1: the heuristic against VARIANTS (Config overrides) in alternating rounds (ab_nm_decode.py).
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/decode_persist_h100.sh
#   CUTLASS_NM_COMMIT=<sha> AB=1 VARIANTS='[{}, {"persist": 2, "min_ctas": 0}]' \
#     bash .device/on-device.sh bash benchmarks/decode_persist_h100.sh
source benchmarks/device_env.sh
tag=${CUTLASS_NM_COMMIT:-local}
variants=${VARIANTS:-"[{}]"}
if [ "${AB:-0}" = 1 ]; then
  (cd benchmarks && timeout "${AB_S:-500}" python3 ab_nm_decode.py --shapes "${SHAPES:-8192x8192,11008x4096,4096x4096}" \
    --patterns "${PATTERNS:-2:8,1:8,16:32,128:2:8}" --tokens "${TOKENS:-1,16}" --variants "$variants" \
    --rounds "${ROUNDS:-5}" --out "$OUT/ab_nm_decode_persist_$tag.json" 2>&1 | grep -v '^{' | tail -60)
else
  timeout 200 python3 benchmarks/precompile_decode_tests.py --persist 2>&1 | tail -3
  timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_nm_decode.py -k "persist or chain" -p no:cacheprovider 2>&1 \
    | tee "$OUT/gpu_tests_nm_decode_persist_$tag.log" | tail -15
fi
gpu_clocks_summary

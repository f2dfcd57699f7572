#!/usr/bin/env bash
# Issue 6: decode-path configs in alternating rounds (benchmarks/ab_nm_decode.py): the heuristic's config and
# VARIANTS (JSON list of Config overrides), with a same-bytes copy and cuBLAS timed in every round.
#   CUTLASS_NM_COMMIT=<sha> VARIANTS='[{}, {"min_ctas": 4}]' bash .device/on-device.sh bash benchmarks/ab_decode_h100.sh
source benchmarks/device_env.sh
variants=${VARIANTS:-"[{}]"}
cd benchmarks
timeout "${AB_S:-500}" python3 ab_nm_decode.py --shapes "${SHAPES:-8192x8192,4096x4096}" \
  --patterns "${PATTERNS:-2:8,1:8,16:32,128:2:8}" --tokens "${TOKENS:-1,16}" --variants "$variants" \
  --rounds "${ROUNDS:-5}" --out "$OUT/ab_nm_decode_${CUTLASS_NM_COMMIT:-local}.json"

#!/usr/bin/env bash
# Issue 6, the decode path's fixed cost: per-CTA phase timestamps (CNM_TRACE build) of the heuristic's config and
# VARIANTS (JSON list of Config overrides), alone and at the end of a PDL chain, next to the per-call time.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/trace_decode_h100.sh
source benchmarks/device_env.sh
variants=${VARIANTS:-"[{}]"}
cd benchmarks
timeout "${TRACE_S:-400}" python3 trace_nm_decode.py --shapes "${SHAPES:-8192x8192}" --patterns "${PATTERNS:-2:8,1:8,16:32}" \
  --tokens "${TOKENS:-1,16}" --variants "$variants" --out "$OUT/nm_decode_trace_${CUTLASS_NM_COMMIT:-local}.json"

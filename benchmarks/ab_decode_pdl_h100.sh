#!/usr/bin/env bash
# Issue 6 / 8: the LLaMA block's decode step at 128:2:8 with the decode path's PDL on and off, alternating.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/ab_decode_pdl_h100.sh
source benchmarks/device_env.sh
timeout 300 python3 benchmarks/ab_decode_pdl.py --out "$OUT/ab_decode_pdl.json" 2>&1 | tail -3

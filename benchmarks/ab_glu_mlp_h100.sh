#!/usr/bin/env bash
# Issue 8 on the H100: LLaMA-7B's prefill MLP, dense against 128:2:8 with fused gate/up, in alternating rounds.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/ab_glu_mlp_h100.sh
source benchmarks/device_env.sh
cd benchmarks && timeout 400 python3 ab_glu_mlp.py --out "$OUT/ab_glu_mlp.json"

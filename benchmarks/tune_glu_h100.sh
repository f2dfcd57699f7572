#!/usr/bin/env bash
# The tuner on the fused gate/up family (vnm_glu_sm90) for LLaMA-7B's gate/up (2048 tokens, 22016 x 4096 fused,
# 256:2:8) into a fresh SQLite DB; prints the winner against the heuristic and exports the records.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/tune_glu_h100.sh
source benchmarks/device_env.sh
export CUTLASS_NM_DB="sqlite:///$OUT/glu_tune.db"
python3 -m cutlass_nm.cli db upgrade > /dev/null
timeout "${TUNE_S:-420}" python3 -m cutlass_nm.cli tune --shape "${SHAPE:-2048,22016,4096}" --pattern 256:2:8 --family vnm_glu_sm90 \
  --trials "${TRIALS:-16}" 2>&1 | tail -25
python3 -m cutlass_nm.cli db ls 2>&1 | tail -5
python3 -m cutlass_nm.cli db export --out "$OUT/glu_records.jsonl"

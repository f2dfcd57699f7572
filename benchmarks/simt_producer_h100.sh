#!/usr/bin/env bash
# nm_simt with a producer warp: the GPU tests, acceptance bench and Nsight profile of simt_tma_h100.sh, then the
# per-tile trace of trace_simt_h100.sh.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/simt_producer_h100.sh
bash benchmarks/simt_tma_h100.sh && bash benchmarks/trace_simt_h100.sh

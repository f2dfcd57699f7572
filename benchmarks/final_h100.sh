#!/usr/bin/env bash
# One device call: precompile (in parallel) what the GPU tests and the LLaMA block need, then the GPU tests of
# V:N:M, the torch integration (2:4 and V:N:M) and the N:M decode path, the LLaMA block (2:4 and 128:2:8) and
# the decode benchmark. Carry .kc (a kernel cache tarball, benchmarks/README.md) to skip compiled kernels.
#   bash .device/on-device.sh bash benchmarks/final_h100.sh [extra test files...]
set -uo pipefail
mkdir -p .kcache "$OUT"
[ -f .kc/kcache.tar.xz ] && tar -C .kcache -xJf .kc/kcache.tar.xz
export CUTLASS_NM_CACHE="$PWD/.kcache" CUTLASS_NM_DB=off
t0=$(date +%s)
python3 benchmarks/precompile_gpu_tests.py --families vnm_sm90 --tokens 1,2048 &
python3 benchmarks/precompile_gpu_tests.py --families sptc24_sm90 --tokens 1,64,128,2048 --dtypes f16 &
wait
echo "precompiled in $(( $(date +%s) - t0 )) s"
timeout 260 python3 -m pytest -m gpu -q tests/test_gpu_vnm.py tests/test_nn.py tests/test_gpu_nm_decode.py "$@" 2>&1 \
  | tee "$OUT/gpu_final.log" | tail -8
timeout 150 python3 benchmarks/bench_llama_block.py --out "$OUT/llama_block.json" 2>&1 | tail -14
timeout 100 python3 benchmarks/bench_nm_decode.py --out "$OUT/nm_decode.json" 2>&1 | tail -12
echo "total $(( $(date +%s) - t0 )) s"

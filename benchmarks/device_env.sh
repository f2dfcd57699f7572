# Sourced by the device scripts (run from the repository root by .device/on-device.sh): a kernel cache that lives
# in the checkout for the machine's lifetime, the tuning DB off (heuristic configs, nothing written), and the GPU's
# name, driver and clocks at the start of the log.
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache" CUTLASS_NM_DB=off
mkdir -p "$CUTLASS_NM_CACHE"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv,noheader
# gpu_tests FILE LOG [SECONDS]: the GPU tests of FILE into $OUT/LOG; ends the calling script unless all passed.
gpu_tests() {
  timeout "${3:-240}" python3 -m pytest -q -m gpu "$1" -p no:cacheprovider 2>&1 | tee "$OUT/$2" | tail -8
  grep -q " passed" "$OUT/$2" && ! grep -q "failed\|error" "$OUT/$2" || { echo "GPU tests did not pass: no bench"; exit 1; }
}

# Sourced by the device scripts (run from the repository root by .device/on-device.sh): a kernel cache that lives
# in the checkout for the machine's lifetime, the tuning DB off (heuristic configs, nothing written), and the GPU's
# name, driver and clocks at the start of the log.
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache" CUTLASS_NM_DB=off
mkdir -p "$CUTLASS_NM_CACHE"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv,noheader

# Sourced by the device scripts (run from the repository root by .device/on-device.sh): a kernel cache that lives
# in the checkout for the machine's lifetime, the tuning DB off (heuristic configs, nothing written), and the GPU's
# name, driver and clocks at the start of the log.
set -uo pipefail
export CUTLASS_NM_CACHE="$PWD/.kcache" CUTLASS_NM_DB=off
mkdir -p "$CUTLASS_NM_CACHE/kernels"
# kernels built off the GPU (same nvcc; the cache key is source, flags, nvcc version and arch), carried in .device
[ -f .device/kcache.tar.xz ] && tar -xJf .device/kcache.tar.xz -C "$CUTLASS_NM_CACHE/kernels"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv,noheader
# gpu_tests FILE LOG [SECONDS]: the GPU tests of FILE into $OUT/LOG; ends the calling script unless all passed.
gpu_tests() {
  timeout "${3:-240}" python3 -m pytest -q -m gpu "$1" -p no:cacheprovider 2>&1 | tee "$OUT/$2" | tail -8
  grep -q " passed" "$OUT/$2" && ! grep -q "failed\|error" "$OUT/$2" || { echo "GPU tests did not pass: no bench"; exit 1; }
}
# The GPU's clock, temperature and clock-event reasons every 2 s into $OUT/gpu_clocks.csv for the rest of the script
# (a thermally throttled H100 ran 690-1350 MHz at 86-87 °C through one bench: 0x20 = software thermal slowdown);
# gpu_clocks_summary prints the range seen.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks_event_reasons.active,power.draw,temperature.gpu \
  --format=csv,noheader -lms 2000 >> "$OUT/gpu_clocks.csv" 2>/dev/null &
CLOCK_LOGGER=$!
trap 'kill $CLOCK_LOGGER 2>/dev/null' EXIT
gpu_clocks_summary() {
  awk -F', ' '{split($2, c, " "); if (c[1] + 0 > 0) { n++; s += c[1]; if (!lo || c[1] < lo) lo = c[1]; if (c[1] > hi) hi = c[1];
    if ($5 + 0 > t) t = $5 + 0; r[$3]++ } } END { printf "SM clock %d-%d MHz (mean %.0f) over %d samples, max %d C, reasons:", lo, hi, s / n, n, t;
    for (k in r) printf " %s x%d", k, r[k]; print "" }' "$OUT/gpu_clocks.csv"
}

#!/usr/bin/env bash
# Issue 6, the decode path's value stream: mode 2's GPU tests with the values in registers and by TMA bulk copies
# (bulk = 1), x in two pieces among them; a sweep of bulk against registers, cuBLAS and a same-bytes copy in the
# same run. (Its first run, at 912fa1b, also ran Nsight Compute on mode 2: results/h100/profiles/ncu_nm_decode_mode2_*.)
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/decode_bulk_h100.sh
source benchmarks/device_env.sh
# mode 2 with the values streamed by TMA bulk copies (bulk = 1) against registers: tests, then a sweep
timeout 240 python3 benchmarks/precompile_decode_tests.py 2>&1 | tail -1
timeout 150 python3 -m pytest -m gpu -q tests/test_gpu_nm_decode.py -k "mode2 or pieces" 2>&1 \
  | tee "$OUT/gpu_tests_nm_decode_bulk.log" | tail -2
timeout 220 python3 benchmarks/sweep_nm_decode.py --vector 32 --modes 2 --warps 4,8,16 --mode-ahead 2,4 --bulk 0,1 \
  --shapes 4096x4096,8192x8192 --patterns 2:8,16:32 --tokens 1,4,16 --out "$OUT/nm_decode_sweep_bulk.json" 2>&1 \
  | grep -v "^{" | tail -3
python3 - "$OUT/nm_decode_sweep_bulk.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
for r in sorted(rows, key=lambda r: (r["n"], r["pattern"], r["m"], r["median_ms"])):
    c = r["config"]
    print(r["n"], r["k"], r["pattern"], r["m"], f"w{c['warps']} a{c['ahead']} b{c['bulk']}", f"{r['median_ms']*1e3:.1f} us",
          f"copy {r['same_bytes_copy_ms']*1e3:.1f} us", f"{r['effective_tb_s']:.2f} TB/s")
PY

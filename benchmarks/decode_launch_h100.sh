#!/usr/bin/env bash
# Issue 6, the decode path's fixed cost: launch options. GPU tests of a fixed split and of programmatic dependent
# launch (PDL, a chain whose every x is the previous output), then a sweep of mode 2 over warps x ahead x bulk x
# split (CTAs per cluster along k) x pdl, each row with its launch (clusters, and how many fit at once), against
# cuBLAS and a same-bytes copy timed in the same run.
#   CUTLASS_NM_COMMIT=<sha> bash .device/on-device.sh bash benchmarks/decode_launch_h100.sh
source benchmarks/device_env.sh
timeout 120 python3 benchmarks/precompile_decode_tests.py 2>&1 | tail -2
timeout 90 python3 -m pytest -m gpu -q tests/test_gpu_nm_decode.py -k "launch_options or pdl_chain" 2>&1 \
  | tee "$OUT/gpu_tests_nm_decode_launch.log" | tail -3
timeout 380 python3 benchmarks/sweep_nm_decode.py --vector 32 --modes 2 --warps 4,8,16 --mode-ahead 2,4,8 --bulk 0,1 \
  --split 1,2,4,8 --pdl 0,1 --shapes 8192x8192,4096x4096 --patterns 2:8,1:8,16:32 --tokens 1,16 \
  --out "$OUT/nm_decode_sweep_launch.json" 2>&1 | grep -v "^{" | tail -3
python3 - "$OUT/nm_decode_sweep_launch.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
key = lambda r: (r["n"], r["pattern"], r["m"])
for k in sorted({key(r) for r in rows}):
    rs = sorted((r for r in rows if key(r) == k), key=lambda r: r["median_ms"])
    print(*k, f"copy {rs[0]['same_bytes_copy_ms']*1e3:.1f} us")
    for r in rs[:6] + rs[-2:]:
        c, l = r["config"], r["launch"]
        print(f"  w{c['warps']} a{c['ahead']} b{c['bulk']} s{l['split']} p{c['pdl']} clusters {l['clusters']}/"
              f"{l['max_active_clusters']} {r['median_ms']*1e3:.1f} us {r['effective_tb_s']:.2f} TB/s err {r['rel_err']:.1e}")
PY

"""Run every config of the sm90 sweep grid once, each in its own process, 4 at a time.

A config whose kernel faults (illegal instruction/address) is reported instead of killing the run.
    python3 benchmarks/smoke_configs.py [m n k]
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from bench_sptc24 import sweep_configs

from cutlass_nm.families import get_family

CHILD = """
import json, sys, torch, cutlass_nm
from cutlass_nm.families import KernelTypes, get_family
from cutlass_nm.kernels import get_kernel
m, n, k = (int(v) for v in sys.argv[1:4])
fam = get_family("sptc24_sm90")
cfg = fam.Config.from_record(json.loads(sys.argv[4]))
kern = get_kernel(("sptc24_sm90", cfg, KernelTypes("f16", "f16", False)))
x = torch.randn(m, k, device="cuda", dtype=torch.float16)
w, _ = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16))
y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
kern(x, w, None, y)
torch.cuda.synchronize()
ref = x.double() @ w.to_dense().double().T
print(f"rel_err={((y.double() - ref).norm() / ref.norm()).item():.2e}")
"""


def main() -> int:
    import json

    m, n, k = (int(v) for v in sys.argv[1:4]) if len(sys.argv) == 4 else (1024, 1024, 1024)
    cfgs = sweep_configs(get_family("sptc24_sm90"))

    def one(cfg):
        p = subprocess.run([sys.executable, "-c", CHILD, str(m), str(n), str(k), json.dumps(cfg.to_record())],
                           capture_output=True, text=True, timeout=600)
        msg = p.stdout.strip() if p.returncode == 0 else (p.stderr.strip().splitlines() or ["?"])[-1][:120]
        return cfg, p.returncode == 0, msg

    bad = 0
    with ThreadPoolExecutor(4) as pool:
        for cfg, ok, msg in pool.map(one, cfgs):
            bad += not ok
            print(f"{'ok ' if ok else 'ERR'} {cfg.to_record()} {msg}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Run each (family, shape, dtype) once in its own process and report ok / error / fault.

A kernel that faults (illegal address or instruction) poisons its CUDA context; a subprocess per
case keeps one fault from hiding the others.  python3 benchmarks/smoke_sptc24.py
"""

from __future__ import annotations

import subprocess
import sys

CASES = [(m, n, k) for m, n, k in [(1, 256, 512), (64, 4096, 4096), (4096, 4096, 4096), (2048, 11008, 4096),
                                   (300, 1056, 2112)]]
CHILD = """
import sys, torch, cutlass_nm
m, n, k, fam, dt = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], getattr(torch, sys.argv[5])
x = torch.randn(m, k, device="cuda", dtype=dt)
w, _ = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=dt))
y = cutlass_nm.matmul(x, w, family=fam)
torch.cuda.synchronize()
ref = x.double() @ w.to_dense().double().T
print(f"rel_err={((y.double() - ref).norm() / ref.norm()).item():.2e}")
"""


def main() -> int:
    bad = 0
    for fam in ("sptc24_sm90", "sptc24_sm80"):
        for m, n, k in CASES:
            for dt in ("float16", "bfloat16"):
                p = subprocess.run([sys.executable, "-c", CHILD, str(m), str(n), str(k), fam, dt],
                                   capture_output=True, text=True, timeout=900)
                ok = p.returncode == 0
                bad += not ok
                msg = p.stdout.strip() if ok else (p.stderr.strip().splitlines() or ["?"])[-1][:160]
                print(f"{fam:12} {m:>5}x{n:>5}x{k:>5} {dt:9} {'ok ' if ok else 'ERR'} {msg}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

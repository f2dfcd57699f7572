"""One small problem of one kernel family through ``cutlass_nm`` on the GPU, checked against fp64: the program
``tests/test_gpu_sanitizer.py`` runs under compute-sanitizer.

    python3 tests/sanitize_case.py <family>     # prints "ok <family> <relative error>", exits 1 when wrong
"""

from __future__ import annotations

import sys

import torch

import cutlass_nm
from cutlass_nm.formats.glu import fuse_glu
from cutlass_nm.gated_mlp import gated_mlp, reference

# family -> (m, n, k, pattern, x dtype): small, with tails, so the tools finish in seconds
CASES = {
    "sptc24_sm90": (37, 264, 320, "2:4", torch.float16),
    "sptc24_sm80": (37, 256, 320, "2:4", torch.bfloat16),
    "vnm_sm90": (37, 256, 520, "128:2:8", torch.float16),
    "vnm_sm80": (37, 256, 520, "128:2:8", torch.float16),
    "nm_simt": (37, 264, 520, "2:8", torch.float32),
    "nm_decode": (5, 256, 520, "2:8", torch.float16),
    "nm_decode_simt": (5, 250, 523, "3:7", torch.float16),
}
GLU = (37, 256, 512)  # tokens, hidden, model width of the fused SwiGLU MLP


def run(family: str) -> float:
    g = torch.Generator(device="cuda").manual_seed(0)
    if family == "vnm_glu_sm90":
        m, hidden, width = GLU
        x = torch.randn(m, width, device="cuda", dtype=torch.float16, generator=g)
        gate_up = fuse_glu(*(torch.randn(hidden, width, device="cuda", dtype=torch.float16, generator=g)
                             for _ in range(2)), "128:2:8")
        down = cutlass_nm.compress(torch.randn(width, hidden, device="cuda", dtype=torch.float16, generator=g),
                                   "128:2:8", prune=True)
        y, ref = gated_mlp(x, gate_up, down), reference(x.double(), gate_up, down)
    else:
        m, n, k, pattern, dtype = CASES[family]
        vector = 1 if family == "nm_decode_simt" else 32
        x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
        w, _ = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=dtype, generator=g), pattern, vector=vector)
        bias = torch.randn(n, device="cuda", dtype=dtype, generator=g)
        y = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        cutlass_nm.matmul(x, w, bias, out=y, family=family)
        ref = x.double() @ w.to_dense().double().T + bias.double()
    torch.cuda.synchronize()
    return ((y.double() - ref).norm() / ref.norm()).item()


if __name__ == "__main__":
    name = sys.argv[1]
    err = run(name)
    print(f"ok {name} {err:.2e}" if err < 2e-2 else f"WRONG {name} {err:.2e}", flush=True)
    sys.exit(0 if err < 2e-2 else 1)

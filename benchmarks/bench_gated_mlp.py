"""The SwiGLU MLP of LLaMA-sized layers in prefill: dense (cuBLAS) against V:N:M with gate and up separate and
fused (one gathered x for both, SwiGLU in the epilogue, h written transposed for down), timed in one run.

    python3 benchmarks/bench_gated_mlp.py --out benchmarks/results/h100/gated_mlp.json     # on an H100

Per (model, m, pattern): the whole MLP dense / separate / fused, and its GEMMs alone: gate + up as two vnm_sm90
GEMMs (each with its x transpose) against the one vnm_glu_sm90 kernel, down with and without its transpose.
Medians of CUDA-graph replays, x and the sparse weights rotated past L2 (the dense weights alone exceed it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch
import torch.nn.functional as F

import cutlass_nm
from cutlass_nm.bench.timing import copies_to_rotate, time_rotating
from cutlass_nm.dispatch import kernel_for
from cutlass_nm.families import KernelTypes, Problem, get_family
from cutlass_nm.formats.glu import deinterleave, fuse_glu
from cutlass_nm.formats.vnm import VNMWeight
from cutlass_nm.gated_mlp import gated_mlp
from cutlass_nm.kernels import get_kernel

F16 = KernelTypes("f16", "f16", False)
RASTER = (0, 1)  # vnm_sm90 / vnm_glu_sm90 CTA order: weight tiles fastest, or L2-sized token-tile groups (A/B)


def ab_kids(m: int, dim: int, hidden: int) -> dict[str, tuple]:
    """The raster A/B kernels of one row: gate's and down's vnm_sm90 heuristic config, and the glu kernel."""
    sm90, glu = get_family("vnm_sm90"), get_family("vnm_glu_sm90")
    kids = {}
    for raster in RASTER:
        for name, (n, k) in (("gate", (hidden, dim)), ("down", (dim, hidden))):
            cfg = dataclasses.replace(sm90.heuristic(Problem(m, n, k, F16, "128:2:8")), raster=raster)
            kids[f"{name}_raster{raster}_ms"] = ("vnm_sm90", cfg, F16)
        kids[f"glu_raster{raster}_ms"] = ("vnm_glu_sm90", dataclasses.replace(glu.Config(), raster=raster), F16)
    return kids

MODELS = {"llama-7b": (4096, 11008), "llama-13b": (5120, 13824)}


def _ms(fn, copies: int, reps: int) -> float:
    return time_rotating(fn, copies, reps=reps, warmup_ms=100.0).p50_ms


def bench(model: str, m: int, pattern: str, reps: int) -> dict:
    dim, hidden = MODELS[model]
    dt = torch.float16
    g = torch.Generator(device="cuda").manual_seed(0)
    gate, up = (torch.randn(hidden, dim, device="cuda", dtype=dt, generator=g) / dim**0.5 for _ in range(2))
    down = torch.randn(dim, hidden, device="cuda", dtype=dt, generator=g) / hidden**0.5
    fused = fuse_glu(gate, up, pattern)
    d_w, _ = cutlass_nm.prune(down, pattern)
    g_w, _ = cutlass_nm.prune(gate, pattern)
    u_w, _ = cutlass_nm.prune(up, pattern)
    sparse_bytes = sum(t.numel() * t.element_size() for w in (fused, d_w) for t in (w.values, w.columns, w.meta))
    wc = min(4, copies_to_rotate(sparse_bytes))
    fused_ws = [fused] + [VNMWeight(fused.values.clone(), fused.columns.clone(), fused.meta.clone(), fused.shape,
                                    fused.pattern) for _ in range(1, wc)]
    xc = copies_to_rotate(m * dim * 2)
    xs = [torch.randn(m, dim, device="cuda", dtype=dt, generator=g) for _ in range(xc)]
    copies = max(xc, wc)

    def dense(i):
        x = xs[i % xc]
        return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)

    def separate(i):
        x = xs[i % xc]
        return cutlass_nm.matmul(F.silu(cutlass_nm.matmul(x, g_w)) * cutlass_nm.matmul(x, u_w), d_w)

    def fused_mlp(i):
        return gated_mlp(xs[i % xc], fused_ws[i % wc], d_w)

    ldx = -(-m // 8) * 8
    ht = torch.empty(d_w.padded_k, ldx, device="cuda", dtype=dt)
    ht[hidden:].zero_()
    h = ht[:hidden].t()[:m]
    y = torch.empty(m, dim, device="cuda", dtype=dt)
    glu_k = kernel_for("vnm_glu_sm90", xs[0], fused, dt)
    down_k = kernel_for("vnm_sm90", h, d_w, dt)

    def glu_only(i):
        glu_k(xs[i % xc], fused_ws[i % wc], None, ht)

    def gate_up_two(i):
        cutlass_nm.matmul(xs[i % xc], g_w)
        cutlass_nm.matmul(xs[i % xc], u_w)

    def down_from_ht(i):
        down_k(h, d_w, None, y, ht)

    hs = [torch.randn(m, hidden, device="cuda", dtype=dt, generator=g) for _ in range(min(xc, 4))]

    def down_alone(i):
        cutlass_nm.matmul(hs[i % len(hs)], d_w)

    # correctness in the same run: fused against the fp32 masked-dense MLP
    gp, upp = (t.float() for t in deinterleave(fused.to_dense()))
    x0 = xs[0].float()
    ref = (F.silu(x0 @ gp.T) * (x0 @ upp.T)) @ d_w.to_dense().float().T
    out = fused_mlp(0).float()
    row = {"model": model, "m": m, "n_k": [dim, hidden], "pattern": pattern, "x_copies": xc, "weight_copies": wc,
           "fused_rel_err_vs_fp32": ((out - ref).norm() / ref.norm()).item()}
    for name, fn in (("dense_ms", dense), ("separate_ms", separate), ("fused_ms", fused_mlp), ("glu_ms", glu_only),
                     ("gate_up_two_ms", gate_up_two), ("down_from_ht_ms", down_from_ht), ("down_ms", down_alone)):
        row[name] = _ms(fn, copies, reps)
    outs = {"gate": (torch.empty(m, hidden, device="cuda", dtype=dt), g_w, xs),
            "down": (torch.empty(m, dim, device="cuda", dtype=dt), d_w, hs)}
    for name, kid in ab_kids(m, dim, hidden).items():
        kern = get_kernel(kid)
        if name.startswith("glu"):
            row[name] = _ms(lambda i, kern=kern: kern(xs[i % xc], fused_ws[i % wc], None, ht), copies, reps)
        else:
            out, w, src = outs[name.split("_")[0]]
            row[name] = _ms(lambda i, kern=kern, out=out, w=w, src=src: kern(src[i % len(src)], w, None, out), copies,
                            reps)
    row["separate_speedup"] = row["dense_ms"] / row["separate_ms"]
    row["fused_speedup"] = row["dense_ms"] / row["fused_ms"]
    row["glu_over_two_gemms"] = row["glu_ms"] / row["gate_up_two_ms"]
    return row


def precompile_all(models: list[str], ms: list[int]) -> None:
    """Compile every kernel the rows reach (heuristic configs), in parallel."""
    from cutlass_nm.kernels import precompile

    sm90, glu = get_family("vnm_sm90"), get_family("vnm_glu_sm90")
    kids = {("vnm_glu_sm90", glu.Config(), F16)}
    for model in models:
        dim, hidden = MODELS[model]
        for m in ms:
            for n, k in ((dim, hidden), (hidden, dim)):
                kids.add(("vnm_sm90", sm90.heuristic(Problem(m, n, k, F16, "128:2:8")), F16))
            kids.update(ab_kids(m, dim, hidden).values())
    failed = [r for r in precompile(sorted(kids, key=str)) if isinstance(r, Exception)]
    print(f"precompiled {len(kids)} kernels, {len(failed)} failed", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="llama-7b,llama-13b")
    ap.add_argument("--m", default="2048,8192", help="comma-separated token counts")
    ap.add_argument("--patterns", default="128:2:8,128:2:16")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    precompile_all(args.models.split(","), [int(v) for v in args.m.split(",")])
    rows = []
    with torch.inference_mode():
        for model in args.models.split(","):
            for pattern in args.patterns.split(","):
                for m in (int(v) for v in args.m.split(",")):
                    rows.append(bench(model, m, pattern, args.reps))
                    print(json.dumps(rows[-1]), flush=True)
    if args.out:
        from cutlass_nm.bench.env import environment

        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

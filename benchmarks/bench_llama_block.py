"""A LLaMA-style decoder block with random weights (no downloads), dense against 2:4 and V:N:M sparsified.

    python3 benchmarks/bench_llama_block.py --out llama_block.json   # on a GPU
    python3 benchmarks/bench_llama_block.py --tiny                     # CPU smoke run

Reports prefill (batch x 2048 tokens) and decode (1-16 tokens) latency of the block and of its MLP
alone, dense against sparse (same run), the output difference against the masked-dense block, and
whether torch.compile(fullgraph=True) and CUDA-graph replay match eager.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import torch
from torch import nn

from cutlass_nm.nn import SparseGatedMLP, SparseLinear, sparsify, sparsify_gated_mlps
from cutlass_nm.timing import kernel_breakdown


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * self.weight


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, dim: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.mlp = MLP(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.attn_norm(x)
        q, k, v = (p(h).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.mlp_norm(x))


def masked_dense(sparse: nn.Module) -> nn.Module:
    """The same block with every SparseLinear (and SparseGatedMLP) replaced by nn.Linear layers holding the
    decompressed weights."""
    ref = copy.deepcopy(sparse)
    for module in list(ref.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, SparseGatedMLP):
                gate, up, down = child.dense_weights()
                mlp = MLP(child.in_features, child.hidden).to(gate.device, gate.dtype)
                for lin, w in ((mlp.gate_proj, gate), (mlp.up_proj, up), (mlp.down_proj, down)):
                    lin.weight.data.copy_(w)
                setattr(module, child_name, mlp)
            if isinstance(child, SparseLinear):
                lin = nn.Linear(child.in_features, child.out_features, bias=child.bias is not None)
                lin = lin.to(child.values.device, child.values.dtype)
                lin.weight.data.copy_(child.weight_dense())
                if child.bias is not None:
                    lin.bias.data.copy_(child.bias.data)
                setattr(module, child_name, lin)
    return ref


def time_ms(fn, reps: int = 30) -> float:
    """Median latency of ``fn()``: on a GPU, replays of a CUDA graph of one call (as serving engines run a
    block; launch overhead is excluded for dense and sparse alike); on the CPU, wall time (smoke runs only)."""
    if not torch.cuda.is_available():
        import time

        fn()
        t0 = time.perf_counter()
        for _ in range(3):
            fn()
        return (time.perf_counter() - t0) / 3 * 1e3
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def bench_pattern(pattern: str, dense: nn.Module, dims: tuple[int, int], phases: list, tiny: bool,
                  breakdown: bool = False) -> tuple:
    """Rows (prefill and decode latency, block and MLP, dense vs sparse) and checks for one pattern; with
    ``breakdown``, each prefill row also lists the MLP's kernels (torch.profiler, GPU only)."""
    dim, dev, dtype = dims[0], next(dense.parameters()).device, next(dense.parameters()).dtype
    base, _, fuse = pattern.partition("+")  # "128:2:8+glu": gate and up pruned together, one fused kernel
    sparse = copy.deepcopy(dense)
    if fuse:
        sparsify_gated_mlps(sparse, base)
    sparse = sparsify(sparse, base, include=["*_proj"], force=True)  # the block as pruned, every layer
    reference = masked_dense(sparse)
    rows = []
    for batch, tokens in phases:
        x = torch.randn(batch, tokens, dim, device=dev, dtype=dtype)
        row = {"pattern": pattern, "batch": batch, "tokens": tokens, "phase": "prefill" if tokens > 1 else "decode",
               "timing": "cuda_graph" if dev.type == "cuda" else "wall",
               "block_dense_ms": time_ms(lambda x=x: dense(x)), "block_sparse_ms": time_ms(lambda x=x: sparse(x)),
               "mlp_dense_ms": time_ms(lambda x=x: dense.mlp(x)),
               "mlp_sparse_ms": time_ms(lambda x=x: sparse.mlp(x)), "rel_diff_vs_masked_dense": rel(sparse(x),
                                                                                                    reference(x))}
        row["block_speedup"] = row["block_dense_ms"] / row["block_sparse_ms"]
        row["mlp_speedup"] = row["mlp_dense_ms"] / row["mlp_sparse_ms"]
        if breakdown and dev.type == "cuda" and tokens > 1:
            row["mlp_kernels_dense"] = kernel_breakdown(lambda x=x: dense.mlp(x))
            row["mlp_kernels_sparse"] = kernel_breakdown(lambda x=x: sparse.mlp(x))
        rows.append(row)
        print(json.dumps(row), flush=True)
    x = torch.randn(1, 16 if tiny else 128, dim, device=dev, dtype=dtype)
    eager = sparse(x)
    checks = {"pattern": pattern, "compile_fullgraph_rel_diff": rel(torch.compile(sparse, fullgraph=True)(x), eager)}
    if dev.type == "cuda":
        static_x = x.clone()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = sparse(static_x)
        g.replay()
        torch.cuda.synchronize()
        checks["cuda_graph_rel_diff"] = rel(static_y, eager)
    print(json.dumps(checks), flush=True)
    return rows, checks


def precompile_block(patterns: list[str], dims: tuple[int, int], token_counts: list[int], dtype: torch.dtype) -> None:
    """Compile, in parallel, the heuristic kernels every projection of the block will ask for (matmul would
    otherwise compile them one at a time on first use)."""
    from cutlass_nm.dispatch import default_family
    from cutlass_nm.families import KernelTypes, Problem, get_family
    from cutlass_nm.families.launch import dtype_name
    from cutlass_nm.formats import Sparse24Weight
    from cutlass_nm.formats.vnm import VNMWeight
    from cutlass_nm.kernels import precompile
    from cutlass_nm.patterns import Pattern

    dim, hidden = dims
    types = KernelTypes(dtype_name(dtype), dtype_name(dtype), False)
    kids = set()
    for pattern in patterns:
        pattern, _, fuse = pattern.partition("+")
        kind = VNMWeight if Pattern.parse(pattern).v else Sparse24Weight
        for m in token_counts:
            family = get_family(default_family(torch.device("cuda"), kind, m, dtype, pattern))
            for n, k in ((dim, dim), (hidden, dim), (dim, hidden)):
                kids.add((family.name, family.heuristic(Problem(m, n, k, types, pattern)), types))
            if fuse:  # the fused gate/up weight (256:2:M): its glu kernel, or the decode path's
                fused = Problem(m, 2 * hidden, dim, types, "256:" + pattern.split(":", 1)[1])
                glu = get_family("vnm_glu_sm90" if m > 16 else "nm_decode")
                kids.add((glu.name, glu.heuristic(fused), types))
    failed = [r for r in precompile(sorted(kids, key=str)) if isinstance(r, Exception)]
    print(f"precompiled {len(kids)} kernels, {len(failed)} failed", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="small dims, CPU ok (a smoke run, no figures)")
    ap.add_argument("--out", type=Path, help="write the result JSON here")
    ap.add_argument("--patterns", default="2:4,128:2:8,128:2:8+glu",
                    help="comma-separated patterns to sparsify with; '+glu': gate and up pruned together and fused")
    ap.add_argument("--decode", default="1,4,16", help="comma-separated decode batch sizes (one token each)")
    ap.add_argument("--breakdown", action="store_true",
                    help="also list each prefill MLP's GPU kernels and their times (torch.profiler)")
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.float16 if dev == "cuda" else torch.float32
    dim, hidden, heads = (256, 512, 4) if args.tiny else (4096, 11008, 32)
    prefill = [(1, 64)] if args.tiny else [(1, 2048), (4, 2048)]
    decode = [1, 4] if args.tiny else [int(b) for b in args.decode.split(",")]
    torch.manual_seed(0)
    dense = Block(dim, hidden, heads).to(dev, dtype).eval()
    if dev == "cuda":
        precompile_block(args.patterns.split(","), (dim, hidden), [b * t for b, t in prefill] + decode, dtype)
    rows, checks = [], []
    with torch.inference_mode():
        for pattern in args.patterns.split(","):
            r, c = bench_pattern(pattern, dense, (dim, hidden), [*prefill, *((b, 1) for b in decode)], args.tiny,
                                 args.breakdown)
            rows += r
            checks.append(c)
    if args.out:
        from cutlass_nm.bench.env import environment

        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": environment(), "rows": rows, "checks": checks}, indent=1))


if __name__ == "__main__":
    main()

"""The N:M decode path (m = 1-16) on the GPU: effective bandwidth against the device's measured copy
bandwidth, and speedup over cuBLAS dense fp16 at the same m, all timed in one run (issue 6).

    python3 benchmarks/bench_nm_decode.py --out benchmarks/results/h100/nm_decode.json

Effective bandwidth = (compressed values + indices as the kernel streams them + x + y bytes) / time. Each row also
times a device copy of the same bytes (``same_bytes_copy_ms``): what one launch per call can reach at that size.
V:N:M rows run twice: forced onto the decode path and on the dispatch default (both the decode path's sparse
tensor cores, mode 3, up to 16 tokens; the weight's stored bytes are counted for both). Each timed sample replays
a graph of back-to-back calls; where the default config launches with programmatic dependent launch (``pdl``),
which lets a call's weight stream start while the previous call finishes, the row is timed again with it off
(``no_pdl_ms``: every call on its own). ``--precompile`` builds the rows' kernels (PDL on and off) and exits: it
needs nvcc, not a GPU, so a device call can start from a carried kernel cache.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import torch

import cutlass_nm
from cutlass_nm.bench.env import environment
from cutlass_nm.bench.run import make_weight
from cutlass_nm.bench.timing import copies_to_rotate, time_rotating
from cutlass_nm.families import KernelTypes, Problem

PATTERNS = ["2:4", "1:4", "2:8", "1:8", "3:7", "5:16", "16:32", "8:32", "4:32", "128:2:8", "128:2:16"]
SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (8192, 8192)]
TOKENS = [1, 4, 16]


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (the ceiling the decode path aims at)."""
    a = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = time_rotating(lambda i: b.copy_(a), 1, reps=30)
    return 2 * a.numel() / (t.p50_ms * 1e-3)


def same_bytes_copy(nbytes: int, copies: int, reps: int = 30) -> float:
    """Median ms of a device copy that moves ``nbytes`` (half read, half written) between ``copies`` pairs of buffers
    rotated past L2, each sample a graph of back-to-back copies as the calls are timed: the ceiling a single launch
    per call reaches at this size (below the large-copy bandwidth where launches and ramps do not amortize). The
    destinations rotate too: one destination written every call stays in L2 and ran above copy bandwidth (H100,
    8192², results/h100/nm_decode_v32_35db2b6.json)."""
    src = [torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda") for _ in range(copies)]
    dst = [torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda") for _ in range(copies)]
    return time_rotating(lambda i: dst[i].copy_(src[i]), copies, reps=reps).p50_ms


def decode_inputs(m: int, n: int, k: int) -> tuple[int, list, float]:
    """For an (m, n, k) decode problem: how many input sets rotate past L2, those x sets, and cuBLAS fp16's median
    time on dense weights of the shape (rotated the same way)."""
    copies = copies_to_rotate(n * k * 2)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(copies)]
    dense = [torch.randn(n, k, device="cuda", dtype=torch.float16) for _ in range(copies)]
    return copies, xs, time_rotating(lambda i: torch.mm(xs[i], dense[i].T), copies).p50_ms


def streamed_bytes(w, family: str | None) -> int:
    """Bytes of weight the kernel reads: values plus its index/metadata form."""
    if isinstance(w, cutlass_nm.NMWeight):
        return w.values.numel() * 2 + w.indices.numel()  # one uint8 index per value and vector of rows
    extra = w.columns.numel() if isinstance(w, cutlass_nm.VNMWeight) else 0
    return w.values.numel() * 2 + w.meta.numel() + extra


def clone_weight(w):
    """The same weight in new memory (its cached kernel layouts are rebuilt for the copy)."""
    fields = {f.name: getattr(w, f.name) for f in dataclasses.fields(w)}
    return dataclasses.replace(w, **{name: (v.clone() if isinstance(v, torch.Tensor) else {} if name == "_layouts"
                                            else v) for name, v in fields.items()})


def add_variant_args(ap: argparse.ArgumentParser, shapes: str, patterns: str) -> None:
    """The options the decode config scripts (ab_nm_decode.py, trace_nm_decode.py) share."""
    ap.add_argument("--shapes", default=shapes, help="NxK,NxK,...")
    ap.add_argument("--patterns", default=patterns)
    ap.add_argument("--tokens", default="1,16")
    ap.add_argument("--variants", default="[{}]", help="JSON list of Config field overrides of the heuristic")
    ap.add_argument("--out", type=Path)


def define_prefix(defines: dict) -> str:
    """``#define`` lines for a variant's code-level alternatives (``"defines"`` in a variant: the template's
    ``#ifndef CNM_...`` blocks): CNM_ names and integer values only."""
    for name, value in defines.items():
        if not re.fullmatch(r"CNM_[A-Z0-9_]+", name) or type(value) is not int:
            raise SystemExit(f"defines: want CNM_NAME: int, got {name!r}: {value!r}")
    return "".join(f"#define {name} {value}\n" for name, value in sorted(defines.items()))


def decode_problem(m: int, n: int, k: int, pattern: str, types: KernelTypes) -> Problem:
    """The problem the decode config scripts time: N:M weights at the format's default vector (32 rows sharing
    their positions, as ``rotated_weights`` prunes them), V:N:M weights without one."""
    return Problem(m, n, k, types, pattern, 0 if cutlass_nm.Pattern.parse(pattern).is_vnm else 32)


def split_variant(over: dict) -> tuple[dict, dict]:
    """A variant's Config field overrides and its defines."""
    return {f: v for f, v in over.items() if f != "defines"}, over.get("defines", {})


def rotation(first) -> list:
    """``first`` and clones of it in new memory, as many as fill 3x L2 by the weight's own bytes."""
    return [first] + [clone_weight(first) for _ in range(copies_to_rotate(streamed_bytes(first, None)) - 1)]


def rotated_weights(pattern: str, n: int, k: int, xs: list) -> tuple[list, list]:
    """The rotation of a pruned n x k weight, and ``xs`` repeated to the same count."""
    ws = rotation(cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16), pattern)[0])
    return ws, [xs[i % len(xs)] for i in range(len(ws))]


def bench_pattern(pattern: str, m: int, n: int, k: int, xs: list, t_dense: float, bw: float, vector: int,
                  family: str | None = None) -> dict:
    """One (pattern, m, n, k) row; weights are rotated past L2 like the inputs."""
    p = cutlass_nm.Pattern.parse(pattern)
    kind = "24" if p.is_24 else "vnm" if p.is_vnm else "nm"
    first = make_weight(torch.randn(n, k, device="cuda", dtype=torch.float16), pattern, kind, vector)
    weight_bytes = streamed_bytes(first, family)
    ws = rotation(first)  # distinct memory, rotated past L2
    copies = len(ws)

    def run(i: int, ws=ws, xs=xs):
        return cutlass_nm.matmul(xs[i % len(xs)], ws[i], family=family)

    y = run(0)
    ref = xs[0].double() @ first.to_dense().double().T
    err = ((y.double() - ref).norm() / ref.norm()).item()
    t = time_rotating(run, copies)
    moved = weight_bytes + m * k * 2 + m * n * 2
    t_copy = same_bytes_copy(moved, copies)
    extra = {}
    switched = []  # whether dispatch's config for this row had PDL on (the selector turned it off)
    cutlass_nm.set_selector(lambda fam, prob: no_pdl(fam, prob, switched))
    try:
        run(0)
        t0 = time_rotating(run, copies).p50_ms if switched else None
    finally:
        cutlass_nm.set_selector(None)
    if t0 is not None:
        extra = {"no_pdl_ms": t0, "no_pdl_fraction_of_copy_bw": moved / (t0 * 1e-3) / bw,
                 "no_pdl_speedup_vs_cublas": t_dense / t0}
    return {"n": n, "k": k, "m": m, "pattern": pattern, "vector": vector, "family": family or "default",
            "median_ms": t.p50_ms, "p20_ms": t.p20_ms,
            "p80_ms": t.p80_ms, "cublas_ms": t_dense, "speedup_vs_cublas": t_dense / t.p50_ms,
            "effective_GBps": moved / (t.p50_ms * 1e-3) / 1e9, "fraction_of_copy_bw": moved / (t.p50_ms * 1e-3) / bw,
            "same_bytes_copy_ms": t_copy, "same_bytes_copy_fraction_of_copy_bw": moved / (t_copy * 1e-3) / bw,
            "fraction_of_same_bytes_copy": t_copy / t.p50_ms, "rel_err": err, **extra}


def no_pdl(family, problem, switched: list | None = None):
    """A dispatch selector: the family's heuristic config with programmatic dependent launch off (each call on its
    own); appends to ``switched`` when that turned PDL off."""
    cfg = family.heuristic(problem)
    if not getattr(cfg, "pdl", 0):
        return cfg
    if switched is not None:
        switched.append(family.name)
    off = {"early_release": 0} if getattr(cfg, "early_release", 0) else {}  # meaningless without PDL: refused
    return dataclasses.replace(cfg, pdl=0, **off)


def row_kernels(shapes: list[tuple[int, int]], tokens: list[int], patterns: list[str], vector: int) -> set:
    """The kernel ids main() will run (dispatch's default family for each row, its heuristic config with PDL on
    and off; fp16 in and out, no bias): for a kernel cache built off the GPU."""
    from cutlass_nm import NMWeight, Sparse24Weight, VNMWeight
    from cutlass_nm.dispatch import default_family
    from cutlass_nm.families import get_family

    types = KernelTypes("f16", "f16", False)
    kids = set()
    for (n, k), m, pattern in ((s, m, p) for s in shapes for m in tokens for p in patterns):
        p = cutlass_nm.Pattern.parse(pattern)
        kind = Sparse24Weight if p.is_24 else VNMWeight if p.is_vnm else NMWeight
        family = get_family(default_family(None, kind, m))
        problem = Problem(m, n, k, types, pattern, vector if kind is NMWeight else 0)
        kids |= {(family.name, family.heuristic(problem), types), (family.name, no_pdl(family, problem), types)}
    return kids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--vector", type=int, default=1)
    ap.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES), help="NxK,NxK,...")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--precompile", action="store_true", help="build the rows' kernels (no GPU needed) and exit")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    tokens = [int(t) for t in args.tokens.split(",")]
    if args.precompile:
        from precompile_tests import build

        build(list(row_kernels(shapes, tokens, args.patterns.split(","), args.vector)), "decode bench kernels")
        return
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    rows = []
    for n, k in shapes:
        for m in tokens:
            _, xs, t_dense = decode_inputs(m, n, k)
            for pattern in args.patterns.split(","):
                families = ["nm_decode", None] if cutlass_nm.Pattern.parse(pattern).is_vnm else [None]
                for family in families:
                    rows.append(bench_pattern(pattern, m, n, k, xs, t_dense, bw, args.vector, family))
                    print(json.dumps(rows[-1]), flush=True)
            del xs
            if args.out:  # after every (shape, m): a time limit keeps what was measured
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps({"environment": environment(), "copy_bandwidth_Bps": bw,
                                                "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

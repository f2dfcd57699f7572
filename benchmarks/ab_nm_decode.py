"""Decode-path configs against each other in alternating rounds (issue 6): for each shape, token count and pattern,
the heuristic's config and VARIANTS (Config overrides) are timed in turn, round after round, each as a CUDA graph of
back-to-back calls over weights rotated past L2; a same-bytes device copy and cuBLAS fp16 are timed in every round
too. Medians over rounds, effective bandwidth as a fraction of the device's copy bandwidth measured in the run.

    python3 benchmarks/ab_nm_decode.py --variants '[{}, {"min_ctas": 4, "early_release": 1}]' \
        --out benchmarks/results/h100/ab_nm_decode.json

A variant may also carry ``"defines": {"CNM_NAME": <int>}``, prepended to the kernel source: with a code-level
alternative put behind ``#ifndef CNM_NAME`` in codegen/templates/nm_decode.cu for the experiment, both versions of
the kernel are timed in the same rounds (results/h100/NOTES.md, 2026-12-01).
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import itertools
import json
import statistics

import torch
from bench_nm_decode import (
    add_variant_args,
    copy_bandwidth,
    decode_inputs,
    decode_problem,
    define_prefix,
    rotated_weights,
    split_variant,
    streamed_bytes,
)

from cutlass_nm.bench.env import environment
from cutlass_nm.bench.timing import copies_to_rotate, time_rotating
from cutlass_nm.build import build_many
from cutlass_nm.families import KernelTypes
from cutlass_nm.families.nm_decode import FAMILY
from cutlass_nm.kernels import get_kernel, precompile


def launchers(cells: dict, types: KernelTypes) -> dict:
    """A launcher per (config, defines): the library's kernels for plain configs, parallel builds of the
    source with the defines prepended otherwise."""
    keys = {(c, tuple(sorted(d.items()))) for cs in cells.values() for c, d in cs}
    plain = {c for c, d in keys if not d}
    precompile({("nm_decode", c, types) for c in plain})
    out = {(c, ()): get_kernel(("nm_decode", c, types)) for c in plain}
    custom = sorted((k for k in keys if k[1]), key=str)
    built = build_many((define_prefix(dict(d)) + FAMILY.source(c, types), FAMILY.arch, "nm_decode_ab")
                       for c, d in custom)
    for (c, d), art in zip(custom, built, strict=True):
        if isinstance(art, Exception):
            raise art
        out[c, d] = FAMILY.bind(ctypes.CDLL(str(art.path)), c, types)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_variant_args(ap, "8192x8192,4096x4096", "2:8,1:8,16:32,128:2:8")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    types = KernelTypes("f16", "f16", False)
    overrides = json.loads(args.variants)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    tokens, patterns = [int(t) for t in args.tokens.split(",")], args.patterns.split(",")
    cfgs, overs = {}, {}  # per cell: the variants check() accepts (max_tokens = 1 skips m = 16), their overrides
    for (n, k), m, p in itertools.product(shapes, tokens, patterns):
        problem = decode_problem(m, n, k, p, types)
        cell = []
        for o in overrides:
            fields, defines = split_variant(o)
            c = dataclasses.replace(FAMILY.heuristic(problem), **fields)
            if (why := FAMILY.check(c, problem)) is not None:
                print(f"{n}x{k} m={m} {p}: skipped {json.dumps(o)}: {why}")
            else:
                cell.append((o, (c, defines)))
        cfgs[n, k, m, p], overs[n, k, m, p] = [c for _, c in cell], [o for o, _ in cell]
    kernels = launchers(cfgs, types)
    bw = copy_bandwidth()  # also the warm-up: 200 ms of copies lift the clocks before the first row
    rows = []
    for (n, k, m, pattern), variants in cfgs.items():
        ws, xs = rotated_weights(pattern, n, k, decode_inputs(m, n, k)[1])
        copies = len(ws)
        dense = [torch.randn(n, k, device="cuda", dtype=torch.float16) for _ in range(copies_to_rotate(n * k * 2))]
        nbytes = streamed_bytes(ws[0], None) + (m * k + m * n) * 2
        src = [torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda") for _ in range(copies)]
        dst = [torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda") for _ in range(copies)]  # rotated too
        y = torch.empty(m, n, device="cuda", dtype=torch.float16)
        ref = xs[0].float() @ ws[0].to_dense().float().T
        runs, errs = [], []
        for cfg, defines in variants:
            run = kernels[cfg, tuple(sorted(defines.items()))]
            for i in range(copies):  # each weight's layout is built (and written) on its first call
                run(xs[i], ws[i], None, y)
            run(xs[0], ws[0], None, y)
            errs.append(float((y.float() - ref).norm() / ref.norm()))
            runs.append(lambda i, run=run, xs=xs, ws=ws, y=y: run(xs[i], ws[i], None, y))
        baselines = (lambda i, s=src, d=dst: d[i].copy_(s[i]), lambda i, a=xs, b=dense: torch.mm(a[i], b[i % len(b)].T))
        times: list[list[float]] = [[] for _ in variants]
        copy_t, dense_t = [], []
        for r in range(args.rounds):
            order = list(range(len(variants)))
            order = order[r % len(order):] + order[:r % len(order)]
            for v in order:
                times[v].append(time_rotating(runs[v], copies, reps=30, warmup_ms=30).p50_ms)
            copy_t.append(time_rotating(baselines[0], copies, reps=30, warmup_ms=30).p50_ms)
            dense_t.append(time_rotating(baselines[1], copies, reps=30, warmup_ms=30).p50_ms)
        t_copy, t_dense = statistics.median(copy_t), statistics.median(dense_t)
        print(f"{n}x{k} m={m} {pattern}: copy {t_copy * 1e3:.1f} us, cuBLAS {t_dense * 1e3:.1f} us")
        for (cfg, _), over, ts, err in zip(variants, overs[n, k, m, pattern], times, errs, strict=True):
            t = statistics.median(ts)
            rows.append({"n": n, "k": k, "m": m, "pattern": pattern, "override": over, "config": cfg.to_record(),
                         "median_ms": t, "rounds_ms": ts, "bytes": nbytes, "same_bytes_copy_ms": t_copy,
                         "cublas_ms": t_dense, "speedup_vs_cublas": t_dense / t,
                         "fraction_of_copy_bw": nbytes / (t * 1e-3) / bw, "rel_err": err})
            print(f"  {json.dumps(over)}: {t * 1e3:.1f} us ({min(ts) * 1e3:.1f}-{max(ts) * 1e3:.1f}), "
                  f"{t_dense / t:.2f}x cuBLAS, {rows[-1]['fraction_of_copy_bw']:.2f} of copy BW, err {err:.1e}")
        del ws, dense, src, dst, baselines, runs
        if args.out:
            args.out.write_text(json.dumps({"environment": environment(), "copy_bandwidth_Bps": bw,
                                            "rounds": args.rounds, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

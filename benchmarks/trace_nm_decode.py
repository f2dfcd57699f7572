"""Where a decode call's time goes: the nm_decode kernel built with CNM_TRACE stamps the global timer per CTA at
entry, x staged, weight stream done, cluster synced and y written, and (modes 2 and 3) when griddepcontrol.wait
returned (codegen/templates/nm_decode.cu): ``stage_us`` runs from entry, ``inputs_wait_us`` from entry to that wait's
return and ``stage_after_wait_us`` from there (a chained call's wait covers the previous call's tail). For each shape
and pattern it runs the heuristic's config (a) alone after a synchronize and (b) as the last call of a PDL chain over
rotated weights, and prints the phases' spread over CTAs next to the chain's per-call time.

    python3 benchmarks/trace_nm_decode.py --shapes 8192x8192 --patterns 2:8,1:8,16:32 --tokens 1,16 \
        --out benchmarks/results/h100/nm_decode_trace.json
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import statistics

import numpy as np
import torch
from bench_nm_decode import (
    add_variant_args,
    decode_inputs,
    decode_problem,
    define_prefix,
    rotated_weights,
    split_variant,
)

from cutlass_nm.bench.env import environment
from cutlass_nm.bench.timing import time_rotating
from cutlass_nm.build import build, build_many
from cutlass_nm.families import KernelTypes
from cutlass_nm.families.nm_decode import FAMILY

PHASES = ("entry", "staged", "streamed", "synced", "written")


def traced_source(cfg, types: KernelTypes, defines: dict) -> str:
    return "#define CNM_TRACE 1\n" + define_prefix(defines) + FAMILY.source(cfg, types)


def traced_launcher(cfg, types: KernelTypes, defines: dict):
    """The family's launcher over a CNM_TRACE build of ``cfg`` (and a variant's defines), and the library (for
    cnm_trace_read)."""
    source = traced_source(cfg, types, defines)
    lib = ctypes.CDLL(str(build(source, FAMILY.arch, "nm_decode_trace").path))
    lib.cnm_trace_read.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return FAMILY.bind(lib, cfg, types), lib


def read_trace(lib, ctas: int) -> np.ndarray:
    torch.cuda.synchronize()
    buf = np.zeros((ctas, 7), dtype=np.uint64)
    assert lib.cnm_trace_read(buf.ctypes.data, ctas) == 0
    return buf


def summarize(buf: np.ndarray) -> dict:
    """Per phase, microseconds from the earliest CTA entry: min / median / max over CTAs; and per-CTA durations."""
    t = buf[:, :5].astype(np.int64)
    t0 = t[:, 0].min()
    rel = (t - t0) / 1e3
    out = {f"{p}_us": [float(rel[:, i].min()), float(np.median(rel[:, i])), float(rel[:, i].max())]
           for i, p in enumerate(PHASES)}
    for name, (a, b) in {"stage_us": (0, 1), "stream_us": (1, 2), "sync_wait_us": (2, 3), "reduce_us": (3, 4)}.items():
        d = (t[:, b] - t[:, a]) / 1e3
        out[name] = [float(d.min()), float(np.median(d)), float(d.max())]
    ready = buf[:, 6].astype(np.int64)
    if (ready >= t[:, 0]).all() and (ready <= t[:, 1]).all():  # stamped by this launch (modes 2 and 3)
        for name, d in {"inputs_wait_us": ready - t[:, 0], "stage_after_wait_us": t[:, 1] - ready}.items():
            out[name] = [float(d.min() / 1e3), float(np.median(d) / 1e3), float(d.max() / 1e3)]
    per_sm = np.bincount(buf[:, 5].astype(np.int64))
    out["ctas_per_sm"] = {str(c): int((per_sm == c).sum()) for c in range(int(per_sm.max()) + 1)}
    out["span_us"] = float(rel[:, 4].max())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_variant_args(ap, "8192x8192", "2:8,1:8,16:32")
    args = ap.parse_args()
    types = KernelTypes("f16", "f16", False)
    overrides = json.loads(args.variants)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    tokens, patterns = [int(t) for t in args.tokens.split(",")], args.patterns.split(",")

    def traced(m: int, n: int, k: int, pattern: str, over: dict) -> tuple:
        fields, defines = split_variant(over)
        return dataclasses.replace(FAMILY.heuristic(decode_problem(m, n, k, pattern, types)), **fields), defines

    # every traced build first, in parallel (the loop below then finds them in the build cache)
    cells = [traced(m, n, k, p, o) for n, k in shapes for m in tokens for p in patterns for o in overrides]
    build_many({(traced_source(cfg, types, defines), FAMILY.arch, "nm_decode_trace") for cfg, defines in cells})
    rows = []
    for n, k in shapes:
        for m in tokens:
            _, xs0, t_dense = decode_inputs(m, n, k)
            for pattern in patterns:
                ws, xs = rotated_weights(pattern, n, k, xs0)
                copies = len(ws)
                for over in overrides:
                    cfg, defines = traced(m, n, k, pattern, over)
                    run, lib = traced_launcher(cfg, types, defines)
                    y = torch.empty(m, n, device="cuda", dtype=torch.float16)
                    launch = run.occupancy(xs[0], ws[0])
                    ctas = launch["split"] * launch["clusters"]
                    for w in ws:  # build every weight's layout (that first call launches without PDL)
                        run(xs[0], w, None, y)
                    alone = []
                    for _ in range(5):
                        torch.cuda.synchronize()
                        run(xs[0], ws[0], None, y)
                        alone.append(summarize(read_trace(lib, ctas)))
                    for _ in range(3):
                        for i in range(copies):
                            run(xs[i], ws[i], None, y)
                    chained = summarize(read_trace(lib, ctas))
                    t = time_rotating(lambda i, xs=xs, ws=ws, y=y, run=run: run(xs[i], ws[i], None, y), copies, reps=50,
                                      warmup_ms=50)
                    ref = xs[0].float() @ ws[0].to_dense().float().T
                    run(xs[0], ws[0], None, y)
                    err = float((y.float() - ref).norm() / ref.norm())
                    row = {"n": n, "k": k, "m": m, "pattern": pattern, "config": cfg.to_record(), "launch": launch,
                           "chain_ms": t.p50_ms, "cublas_ms": t_dense, "rel_err": err,
                           "alone_span_us": statistics.median(a["span_us"] for a in alone),
                           "alone": alone[len(alone) // 2], "chained": chained}
                    rows.append(row)
                    print(f"{n}x{k} m={m} {pattern} {over}: chain {t.p50_ms * 1e3:.1f} us/call, alone span "
                          f"{row['alone_span_us']:.1f} us, err {err:.1e}")
                    for label, s in (("alone", row["alone"]), ("chain", chained)):
                        print(f"  {label}: " + ", ".join(f"{key} {'/'.join(f'{v:.1f}' for v in s[key])}"
                                                         for key in s if key.endswith("_us") and key != "span_us")
                              + f"; span {s['span_us']:.1f}; ctas/SM {s['ctas_per_sm']}")
                del ws
                if args.out:
                    args.out.write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

"""Where vnm_sm90's time goes, by leaving one stage out (no hardware counters needed): the kernel as is, the kernel
whose producer issues no B copies (its MMAs read stale shared memory: timing only), and sptc24_sm90 on the 2:4 problem
of the same MMA work (n x m x gathered k) with B brought by TMA, all timed in one run.

    python3 benchmarks/diagnose_vnm_sm90.py [--cfg 128x256x64x5x2x1x0] [--mnk 4096x4096x4096] [--pattern 128:2:8]
"""

from __future__ import annotations

import argparse
import ctypes

import torch
from bench_vnm import config_record, random_vnm

import cutlass_nm
from cutlass_nm.bench.timing import copies_to_rotate, time_rotating
from cutlass_nm.build.compiler import build_many
from cutlass_nm.families import FAMILIES, KernelTypes

B_COPY = "cp_async_16(&sB(j * 8, kk, stage), src, valid);"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cfg", default="128x256x64x5x2x1x0")
    ap.add_argument("--mnk", default="4096x4096x4096")
    ap.add_argument("--pattern", default="128:2:8")
    args = ap.parse_args()
    fam = FAMILIES["vnm_sm90"]
    cfg = fam.Config.from_record(config_record(fam.Config, args.cfg))
    types = KernelTypes("f16", "f16", False)
    src = fam.source(cfg, types)
    if B_COPY not in src:
        raise SystemExit("the template's B copy line changed: update B_COPY")
    sources = {"as is": src, "no B copies": src.replace(B_COPY, "(void)src; (void)valid;")}
    built = build_many([(s, fam.arch, f"diag_{i}") for i, s in enumerate(sources.values())])
    m, n, k = map(int, args.mnk.split("x"))
    w = random_vnm(n, k, args.pattern)
    copies = copies_to_rotate(m * k * 2)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(copies)]
    y = torch.empty(m, n, device="cuda", dtype=torch.float16)
    for (name, _), art in zip(sources.items(), built, strict=True):
        if isinstance(art, Exception):
            print(f"{name:28s} build failed: {art}")
            continue
        run = fam.bind(ctypes.CDLL(str(art.path)), cfg, types)
        t = time_rotating(lambda i, run=run: run(xs[i], w, None, y), copies, reps=50)
        print(f"{name:28s} {t.p50_ms:.4f} ms", flush=True)
    kg = w.gathered_k(64)  # the MMA's k: 4 of every M columns
    x24 = [torch.randn(m, kg, device="cuda", dtype=torch.float16) for _ in range(copies)]
    w24 = cutlass_nm.prune(torch.randn(n, kg, device="cuda", dtype=torch.float16), "2:4")[0]
    t = time_rotating(lambda i: cutlass_nm.matmul(x24[i], w24), copies, reps=50)
    print(f"{'sptc24_sm90 ' + f'{m}x{n}x{kg}':28s} {t.p50_ms:.4f} ms (same MMA work, B by TMA)", flush=True)
    dense = w.to_dense()
    t = time_rotating(lambda i: torch.nn.functional.linear(xs[i], dense), copies, reps=50)
    print(f"{'cuBLAS dense':28s} {t.p50_ms:.4f} ms", flush=True)


if __name__ == "__main__":
    main()

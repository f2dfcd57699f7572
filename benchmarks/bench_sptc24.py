"""2:4 SpMM on the H100: cutlass_nm families against cuBLAS dense and cuSPARSELt, timed in one run.

    python3 benchmarks/bench_sptc24.py --preset llm --sweep --out benchmarks/results/h100/sptc24.json

Every row carries the time (median, p20, p80), dense-equivalent TFLOP/s, and its ratio to cuBLAS
and to cuSPARSELt measured in this same process. ``--sweep`` also times a grid of sm90 configs
(untuned: ``tuned: false``) and reports the best, to steer the heuristic until the tuner lands.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import torch

import cutlass_nm
from cutlass_nm.bench.baselines import MODES, cublas_dense, cusparselt_isolated
from cutlass_nm.bench.env import environment
from cutlass_nm.bench.timing import copies_to_rotate, time_rotating
from cutlass_nm.families import KernelTypes, Problem, get_family
from cutlass_nm.kernels import get_kernel, precompile

PRESETS = {
    "quick": [(4096, 4096, 4096), (64, 4096, 4096)],
    # (m, n, k): squares from the issue, the LLaMA-7B layers at m = 2048, a large m, decode-ish m
    "llm": [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 4096, 4096), (2048, 11008, 4096),
            (2048, 4096, 11008), (2048, 12288, 4096), (16384, 4096, 4096), (1024, 4096, 4096),
            (256, 4096, 4096), (64, 4096, 4096), (16, 4096, 4096)],
    # where the untuned kernels trailed cuSPARSELt after mm_search (sptc24_llm.json, tuner.json)
    "contested": [(8192, 8192, 8192), (2048, 11008, 4096), (2048, 12288, 4096), (16384, 4096, 4096)],
    "small": [(16, 4096, 4096), (64, 4096, 4096)],
    # the llm preset at m >= 1024 (the acceptance set), plus one small m per regime
    "accept": [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 4096, 4096), (2048, 11008, 4096),
               (2048, 4096, 11008), (2048, 12288, 4096), (16384, 4096, 4096), (1024, 4096, 4096),
               (256, 4096, 4096), (16, 4096, 4096)],
}


def sweep_configs(family, grid: str = "coarse") -> list:
    """A grid over the sm90 space (the tuner searches the whole space).

    ``coarse``: tiles x clusters x schedules. ``focused``: the best large-m configs of the coarse sweep and the
    tuner (cooperative, 256x128x128 / 128x256x64, their clusters) x {persistent, stream-K} x the runtime-only
    raster order and swizzle, which cost no extra compile (10 kernels, 90 points). ``pipe``: CUTLASS's sparse
    mainloop against ours (``mma_pipe`` 0 / 1) on the tiles and clusters that won somewhere, cuSPARSELt's
    128x256x64 cluster 2x1 among them, and the small-m heuristic tiles (26 kernels, 4 raster/swizzle points each).
    """
    probe = Problem(4096, 4096, 4096, KernelTypes("f16", "f16", False))
    if grid == "small":  # m <= 64: the 128x64x128 tiles, data-parallel or stream-K (n / 128 CTAs fill few SMs)
        points = [dict(tile_m=128, tile_n=64, tile_k=128, cluster_m=cm, cluster_n=1, scheduler=sch, mma_pipe=pipe,
                       raster=r, swizzle=sw)
                  for cm, sch, pipe, (r, sw) in itertools.product((1, 2), ("persistent", "streamk"), (0, 1),
                                                                   (("heuristic", 1), ("n", 8)))]
    elif grid == "pipe":
        kernels = [dict(tile_m=tm, tile_n=tn, tile_k=tk, cluster_m=cm, cluster_n=cn, scheduler=sch)
                   for tm, tn, tk, cm, cn, sch in (
                       (256, 128, 128, 1, 1, "persistent"), (256, 128, 128, 1, 2, "persistent"),
                       (256, 128, 128, 2, 1, "persistent"), (256, 128, 64, 1, 1, "persistent"),
                       (256, 128, 64, 1, 2, "persistent"), (128, 256, 64, 2, 1, "persistent"),
                       (128, 256, 64, 1, 2, "persistent"), (128, 256, 64, 2, 2, "persistent"),
                       (128, 256, 128, 2, 1, "persistent"), (256, 128, 128, 1, 2, "streamk"),
                       (128, 256, 64, 2, 1, "streamk"), (128, 64, 128, 1, 1, "persistent"),
                       (128, 64, 128, 2, 1, "persistent"))]
        points = [dict(kern, mma_pipe=pipe, raster=r, swizzle=sw)
                  for kern in kernels for pipe in (0, 1) for r, sw in (("heuristic", 1), ("m", 1), ("n", 1), ("n", 8))]
    elif grid == "coarse":
        points = [dict(tile_m=tm, tile_n=tn, tile_k=tk, cluster_m=cm, cluster_n=cn, schedule=sched)
                  for tm, tn, tk, (cm, cn), sched in itertools.product(
                      (128, 256), (64, 128, 256), (64, 128), ((1, 1), (2, 1), (1, 2)), ("cooperative", "pingpong"))]
    else:
        big_m = [dict(tile_m=256, tile_n=128, tile_k=128, cluster_m=cm, cluster_n=cn)
                 for cm, cn in ((1, 1), (1, 2), (2, 1))]
        big_n = [dict(tile_m=128, tile_n=256, tile_k=64, cluster_m=cm, cluster_n=cn) for cm, cn in ((2, 2), (1, 2))]
        kernels = big_m + big_n
        points = [dict(kern, scheduler=sch, raster=r, swizzle=sw)
                  for kern, sch, r, sw in itertools.product(kernels, ("persistent", "streamk"), ("heuristic", "m", "n"),
                                                           (1, 4, 8))]
    cfgs = [family.Config(**p) for p in points]
    return [c for c in cfgs if family.check(c, probe) is None]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="quick")
    ap.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    ap.add_argument("--sweep", action="store_true", help="also time a grid of sm90 configs per shape")
    ap.add_argument("--grid", choices=["coarse", "focused", "pipe", "small"], default="coarse",
                    help="which --sweep grid")
    ap.add_argument("--min-m", type=int, default=0, help="only shapes with m >= this")
    ap.add_argument("--families", default="sptc24_sm90,sptc24_sm80", help="heuristic rows for these families")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--cusparselt", default=",".join(MODES),
                    help=f"cuSPARSELt baselines to time, comma-separated (of {','.join(MODES)})")
    ap.add_argument("--out", type=Path, help="write JSON rows here")
    ap.add_argument("--compile-only", action="store_true", help="build every kernel the run needs, then stop")
    ap.add_argument("--tuned", action="store_true",
                    help="also time the tuning DB's winner per shape (rows marked tuned: true)")
    args = ap.parse_args()
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    types = KernelTypes(args.dtype, args.dtype, False)
    shapes = [s for s in PRESETS[args.preset] if s[0] >= args.min_m]
    sm90 = get_family("sptc24_sm90")
    grid = sweep_configs(sm90, args.grid) if args.sweep else []

    selector = None
    if args.tuned:
        from cutlass_nm.store.lookup import TunedSelector

        selector = TunedSelector()
    kids = set()
    for m, n, k in shapes:
        p = Problem(m, n, k, types)
        tuned = selector(sm90, p) if selector else None
        if tuned is not None:
            kids.add(("sptc24_sm90", tuned, types))
        for name in args.families.split(","):
            kids.add((name, get_family(name).heuristic(p), types))
        kids.update(("sptc24_sm90", c, types) for c in grid if sm90.check(c, p) is None)
    t0 = time.time()
    results = precompile(sorted(kids, key=str))
    failed = {kid: r for kid, r in zip(sorted(kids, key=str), results, strict=True) if isinstance(r, Exception)}
    print(f"compiled {len(kids)} kernels in {time.time() - t0:.0f} s ({len(failed)} failed)", flush=True)
    for kid, err in failed.items():
        print("  build failed:", kid[1], str(err)[:200])
    if args.compile_only:
        return

    env = environment()
    rows = []
    for shape in shapes:
        rows += bench_shape(shape, dtype, args, types, grid, failed, selector)
        _summarize(rows, shape)
        torch.cuda.empty_cache()

    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
        print("wrote", args.out)


def bench_shape(shape, dtype, args, types, grid, failed, tuned_selector=None) -> list[dict]:
    """Rows for one (m, n, k): baselines, both families' heuristic configs, and the sweep grid."""
    m, n, k = shape
    sm90 = get_family("sptc24_sm90")
    copies = copies_to_rotate((m * k + n * k) * 2)
    g = torch.Generator(device="cuda").manual_seed(0)
    xs = [torch.randn(m, k, device="cuda", dtype=dtype, generator=g) for _ in range(copies)]
    sparse = [cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=dtype, generator=g))[0] for _ in range(copies)]
    dense = [w.to_dense() for w in sparse]
    flops = 2.0 * m * n * k
    ref = xs[0].double() @ dense[0].double().T
    rows: list[dict] = []
    base = {"m": m, "n": n, "k": k, "dtype": args.dtype, "tuned": False}

    def record(impl, fn, cfg=None, tuned=False):
        try:
            y = fn(0)
            torch.cuda.synchronize()
            err = ((y.double() - ref).norm() / ref.norm()).item()
            # the first rows warm the clocks; a sweep's many variants then need only a short warm-up each
            t = time_rotating(fn, copies, reps=args.reps, warmup_ms=50.0 if impl.endswith("_sweep") else 200.0)
        except Exception as exc:  # a failed variant is a row, not the end of the run
            rows.append({**base, "impl": impl, "error": str(exc)[:300]})
            return
        rows.append({**base, "tuned": tuned, "impl": impl, "config": cfg.to_record() if cfg else None,
                     "median_ms": t.p50_ms,
                     "p20_ms": t.p20_ms, "p80_ms": t.p80_ms, "reps": t.reps, "timing": t.method,
                     "tflops": flops / t.p50_ms / 1e9, "rel_err": err})

    record("cublas", cublas_dense(xs, dense))
    modes = tuple(mode for mode in args.cusparselt.split(",") if mode)
    for name, res in cusparselt_isolated(m, n, k, args.dtype, args.reps, modes).items():
        if "median_ms" in res:
            res["tflops"] = flops / res["median_ms"] / 1e9
        rows.append({**base, "impl": name, **res})
    p = Problem(m, n, k, types)
    for fam in (get_family(name) for name in args.families.split(",")):
        cfg = fam.heuristic(p)
        if (fam.name, cfg, types) not in failed:
            record(f"{fam.name}_heuristic", lambda i, f=fam.name: cutlass_nm.matmul(xs[i], sparse[i], family=f), cfg)
    tuned_cfg = tuned_selector(sm90, p) if tuned_selector else None
    extra = [("sptc24_sm90_tuned", tuned_cfg, True)] if tuned_cfg is not None else []
    for impl, cfg, is_tuned in [*extra, *(("sptc24_sm90_sweep", c, False) for c in grid)]:
        kid = ("sptc24_sm90", cfg, types)
        if sm90.check(cfg, p) is not None or kid in failed:
            continue
        kern = get_kernel(kid)

        def run(i, kern=kern):
            y = torch.empty(m, n, device="cuda", dtype=dtype)
            kern(xs[i], sparse[i], None, y)
            return y

        record(impl, run, cfg, tuned=is_tuned)
    return rows


def _summarize(rows: list[dict], shape: tuple[int, int, int]) -> None:
    mine = [r for r in rows if (r["m"], r["n"], r["k"]) == shape and "median_ms" in r]
    base = {r["impl"]: r["median_ms"] for r in mine}
    cb = base.get("cublas")
    cs = min((base[k] for k in ("cusparselt_default", "cusparselt_search", "torch_semi_structured") if k in base),
             default=None)
    for r in mine:
        r["speedup_vs_cublas"] = cb / r["median_ms"] if cb else None
        r["speedup_vs_cusparselt_best"] = cs / r["median_ms"] if cs else None
    best = min((r for r in mine if r["impl"] == "sptc24_sm90_sweep"), key=lambda r: r["median_ms"], default=None)
    line = f"{'x'.join(map(str, shape)):>18}  cublas {cb:.3f} ms"
    for r in mine:
        if r["impl"] != "sptc24_sm90_sweep":
            line += f" | {r['impl']} {r['speedup_vs_cublas']:.2f}x"
    if best:
        line += f" | sweep-best {best['speedup_vs_cublas']:.2f}x {best['config']}"
    print(line, flush=True)


if __name__ == "__main__":
    main()

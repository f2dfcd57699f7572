"""2:4 against cuBLAS and cuSPARSELt in interleaved rounds, for comparisons closer than the GPU's clock drift.

    python3 benchmarks/interleave_sptc24.py --preset accept --rounds 5 --out sptc24_interleaved.json

A power-limited H100 runs the same kernel a few percent faster or slower depending on what ran just before
(the sweep's short, scattered measurements moved winners by up to 15 %). Here, per shape, every implementation
is timed once per round (warm-up, CUDA-graph replays over inputs rotated past L2, median), the order rotating
each round; a figure is the median over rounds, and "ours / cuSPARSELt" is the median of per-round ratios. All in
one process: cuSPARSELt runs the algorithm ``mm_search`` picks, on a contiguous xᵀ prepared outside the timing.
The output is ``cutlass-nm bench``'s format: ``{"environment": ..., "rows": [...]}``, one row per shape and
implementation (``speedup_vs_*`` are medians of per-round ratios). Needs a CUDA GPU with sm_90 and cuSPARSELt.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

import cutlass_nm
from cutlass_nm.bench.env import environment
from cutlass_nm.families import KernelTypes, Problem, get_family
from cutlass_nm.kernels import get_kernel
from cutlass_nm.timing import copies_to_rotate, time_rotating

# (m, n, k): the 2:4 acceptance shapes (squares, LLaMA-7B layers at 2048 tokens, a large m) and one small m per regime
PRESETS = {
    "accept": [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 4096, 4096), (2048, 11008, 4096),
               (2048, 4096, 11008), (2048, 12288, 4096), (16384, 4096, 4096), (1024, 4096, 4096),
               (256, 4096, 4096), (16, 4096, 4096)],
    "quick": [(4096, 4096, 4096), (16, 4096, 4096)],
}


def _quantile(vals: list[float], q: float) -> float:
    vals = sorted(vals)
    return vals[min(len(vals) - 1, max(0, round(q * (len(vals) - 1))))]


def suite_rows(shape_row: dict) -> list[dict]:
    """One shape's interleaved result as ``cutlass-nm bench`` rows: one per implementation."""
    m, n, k, times = shape_row["m"], shape_row["n"], shape_row["k"], shape_row["times_ms"]

    def ratio(base: str, name: str) -> float:
        return statistics.median(b / t for b, t in zip(times[base], times[name], strict=True))

    out = []
    for name, t in times.items():
        ours = name.startswith("sptc24_sm90_")
        out.append({"m": m, "n": n, "k": k, "name": None, "dtype": "f16",
                    "family": "sptc24_sm90" if ours else None, "impl": name,
                    "pattern": None if name == "cublas" else "2:4", "sparsity": 0.0 if name == "cublas" else 0.5,
                    "engine": "tensor", "tuned": name.endswith("_tuned"),
                    "config": shape_row["configs"].get(name), "median_ms": statistics.median(t),
                    "p20_ms": _quantile(t, 0.2), "p80_ms": _quantile(t, 0.8), "reps": shape_row["reps"],
                    "rounds": shape_row["rounds"], "timing": "graph, interleaved rounds",
                    "speedup_vs_cublas": ratio("cublas", name),
                    "speedup_vs_cusparselt": ratio("cusparselt_search", name)})
    return out


def implementations(m: int, n: int, k: int, tuned_selector) -> tuple[dict, int, dict]:
    """name -> fn(i) for cuBLAS, cuSPARSELt (mm_search), our heuristic and tuned configs; the copy count; configs."""
    fam = get_family("sptc24_sm90")
    types = KernelTypes("f16", "f16", False)
    copies = copies_to_rotate((m * k + n * k) * 2)
    g = torch.Generator(device="cuda").manual_seed(0)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g) for _ in range(copies)]
    ws = [cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16, generator=g))[0]
          for _ in range(copies)]
    dense = [w.to_dense() for w in ws]
    comp = [torch._cslt_compress(d) for d in dense]
    xts = [x.T.contiguous() for x in xs]
    alg, split_k, split_k_mode, _ = torch._C._cusparselt.mm_search(comp[0], xts[0], None, None, None, False)
    impls = {"cublas": lambda i: torch.mm(xs[i], dense[i].T),
             "cusparselt_search": lambda i: torch._cslt_sparse_mm(comp[i], xts[i], alg_id=alg, split_k=split_k,
                                                                  split_k_mode=split_k_mode)}
    problem = Problem(m, n, k, types)
    configs = {"sptc24_sm90_heuristic": fam.heuristic(problem)}
    tuned = tuned_selector(fam, problem) if tuned_selector else None
    if tuned is not None:
        configs["sptc24_sm90_tuned"] = tuned
    ys = [torch.empty(m, n, device="cuda", dtype=torch.float16) for _ in range(copies)]
    for name, cfg in configs.items():
        kern = get_kernel((fam.name, cfg, types))
        impls[name] = lambda i, kern=kern: kern(xs[i], ws[i], None, ys[i])
    ref = xs[0].double() @ dense[0].double().T
    for name, fn in impls.items():  # every implementation computes the same product before it is timed
        out = fn(0)
        y = ys[0] if out is None else (out.T if name == "cusparselt_search" else out)
        err = ((y.double() - ref).norm() / ref.norm()).item()
        if not err < 2e-3:
            raise RuntimeError(f"{name} at {m}x{n}x{k}: relative error {err:.2e}")
    return impls, copies, {k: v.to_record() for k, v in configs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="accept", help="shape set (default: accept)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per shape (default: 5)")
    ap.add_argument("--min-m", type=int, default=0, help="only shapes with m >= this")
    ap.add_argument("--reps", type=int, default=50, help="CUDA-graph replays per timing (default: 50)")
    ap.add_argument("--out", type=Path, help="write the result JSON here")
    args = ap.parse_args()
    from cutlass_nm.store.lookup import TunedSelector

    selector = TunedSelector()
    rows = []
    for m, n, k in [s for s in PRESETS[args.preset] if s[0] >= args.min_m]:
        impls, copies, configs = implementations(m, n, k, selector)
        names = list(impls)
        times: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            for name in order:
                times[name].append(time_rotating(impls[name], copies, reps=args.reps, warmup_ms=200.0).p50_ms)
        shape_rows = suite_rows({"m": m, "n": n, "k": k, "rounds": args.rounds, "reps": args.reps,
                                 "configs": configs, "times_ms": times})
        rows += shape_rows
        print(f"{m}x{n}x{k}: " + " | ".join(f"{r['impl']} {r['speedup_vs_cublas']:.3f}x cuBLAS, "
                                            f"{r['speedup_vs_cusparselt']:.3f} of cuSPARSELt" for r in shape_rows[1:]),
              flush=True)
        del impls
        torch.cuda.empty_cache()
    if args.out:
        args.out.write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

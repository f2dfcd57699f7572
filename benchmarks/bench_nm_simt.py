"""nm_simt (general N:M on CUDA cores) against cuBLAS SGEMM with TF32 off, on NM-SpMM's LLaMA shape set (issue 6's
fp32 acceptance), plus fp16-input rows against cuBLAS fp16 for reference; every ratio is timed in the same run.

    python3 benchmarks/bench_nm_simt.py --out benchmarks/results/h100/nm_simt.json
    python3 benchmarks/bench_nm_simt.py --quick          # 2 shapes x 4 patterns

Per (shape, sparsity level) every config of the sweep (SWEEP x split-K choices, filtered by the family's check)
is timed for the level's first pattern and the fastest kept: those rows say ``tuned_by_sweep: true`` and carry
the config (the heuristic's time is in ``heuristic_ms``). The level's other patterns (2:4 after 16:32, 1:4 and
2:8 after 8:32, 1:8 after 4:32) run the same k-tile work and time that winner only, as do the fp16 rows
(``config_source`` says which). All kernels are compiled in parallel first. The relative error of
the reported config is checked against an fp64 reference on the first 64 tokens. Each reported ratio is the median
over ``--rounds`` alternating timings of cuBLAS and the winner (``rounds``), so a GPU clock that drifts during the
run (thermal slowdown) does not skew it; the sweep's own timing of the winner is kept as ``sweep_p50_ms``.
Ideal speedup over dense is M/N; ``pct_of_ideal`` = speedup over SGEMM / (M/N).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from cutlass_nm.bench.env import environment
from cutlass_nm.bench.timing import copies_to_rotate, time_rotating
from cutlass_nm.families import KernelTypes, Problem
from cutlass_nm.families.nm_simt import FAMILY, Config, own_producer, tail_split_for
from cutlass_nm.formats.nm import compress_nm
from cutlass_nm.kernels import get_kernel, precompile
from cutlass_nm.patterns import Pattern

LLAMA_NK = ((4096, 4096), (12288, 4096), (11008, 4096), (4096, 11008))
TOKENS = (256, 512, 1024, 2048, 4096)
PATTERNS = ("16:32", "2:4", "12:32", "8:32", "1:4", "2:8", "4:32", "1:8")
# base configs of the sweep; each is also tried with split-K 2 and 4 where the tiles do not fill the GPU
_BASES = (Config(), Config(block_rows=256, block_tokens=64, k_cols=64), Config(block_tokens=256, thread_tokens=16),
          Config(k_cols=64))
# longer k-tiles (more compressed steps per k-tile at high sparsity) and 16-row thread tiles
_WIDE = (Config(block_rows=256, block_tokens=64, k_cols=128), Config(block_tokens=256, thread_tokens=16, k_cols=64),
         Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=64, stages=2),
         Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=64, stages=3),
         Config(block_rows=256, block_tokens=64, thread_rows=16, k_cols=64))
# Transposed x, stages filled by TMA (cp.async where the GPU has no TMA). At f38fb7d this variant of each base was
# the fastest config on all 55 shapes the sweep reached, 1-11 % ahead of the best cp.async, untransposed or compact
# one (results/h100/nm_simt_pipe_f38fb7d.json), so the sweep times only these: it then covers the whole shape set
# within the budget (at f38fb7d the 40 shapes with n or k = 11008 got the heuristic alone). The others stay in the
# tuner's space.
# deeper pipelines of 32-column k-tiles: more tiles in flight when a stage's refill waits for the slowest warp
_DEEP = (Config(block_tokens=256, thread_tokens=16, k_cols=32, stages=5),
         Config(block_tokens=256, thread_tokens=16, k_cols=32, stages=4),
         Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=32, stages=4))
# longer k-tiles at high sparsity (stop 32): 12-16 kept steps a tile at 87.5 % instead of 8. Against the 64-column
# tiles they were level (geomean 0.995 at 4:32, 1.011 at 8:32 from 1024 tokens, nm_simt_plain_8_32_*_40e8f40)
_LONG = (Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=128, stages=2),
         Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=96, stages=3),
         Config(block_tokens=256, thread_tokens=16, k_cols=96, stages=2))
SWEEP = tuple(Config(**{**c.to_record(), "x_transposed": 1, "tma": 1}) for c in (*_BASES, *_WIDE, *_DEEP, *_LONG))
# each 8 x 16 base also with chained k-tiles (chain = 1, stop 34)
SWEEP += tuple(replace(c, chain=1) for c in SWEEP if (c.thread_rows, c.thread_tokens) == (8, 16))
# two warp groups splitting each k-tile's steps (k_warps = 2) on 128 x 128 CTAs: half the outputs a CTA of the 8 x 16 /
# 16 x 8 tiles above at the same thread tile, so small calls fill the GPU with fewer (or no) splits of k across CTAs
KWARPS = tuple(Config(block_rows=128, block_tokens=128, x_transposed=1, tma=1, k_warps=2, **c) for c in (
    {"thread_tokens": 16, "k_cols": 64, "stages": 3}, {"thread_tokens": 16, "k_cols": 128, "stages": 2},
    {"thread_rows": 16, "k_cols": 64, "stages": 3}, {"thread_rows": 16, "k_cols": 96, "stages": 3},
    # 3 stages of 128 columns fit at densities <= 1/8 only (72 KB a stage at 4:32); 3 of 96 won nothing at 50-75 %
    # (results/h100/ab_nm_simt_kwarps96_008baba.json)
    {"thread_tokens": 16, "k_cols": 128, "stages": 3}))
# --compact: stages holding only the xᵀ rows a CTA's vectors use (cp.async). With one vector a CTA (vector a
# multiple of block_rows) a k-tile keeps a step per staged row, so x bytes per FMA stop growing with sparsity.
COMPACT_SWEEP = tuple(Config(**{**c.to_record(), "x_transposed": 1, "compact": 1}) for c in (
    Config(block_tokens=256, thread_tokens=16, k_cols=64, stages=2),
    Config(block_tokens=256, thread_tokens=16, k_cols=32, stages=4),
    Config(block_tokens=256, thread_tokens=16, k_cols=32, stages=3),
    Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=32, stages=4),
    Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=64, stages=3)))
# beside them, the TMA configs that won 85 of the 87.5 % and 75 % rows at f1a17b1 (nm_simt_atomic_f1a17b1.json)
TMA_WINNERS = tuple(Config(**{**c.to_record(), "x_transposed": 1, "tma": 1}) for c in (
    Config(block_tokens=256, thread_tokens=16, k_cols=64),
    Config(block_rows=256, block_tokens=128, thread_rows=16, k_cols=64, stages=3)))
TYPES = {"f32": KernelTypes("f32", "f32", False), "f16": KernelTypes("f16", "f16", False)}
SMS = 132
VECTOR = 32  # the weights' index-sharing vector (the format's default; --vector); problems carry it for checks


def candidates(m: int, n: int, k: int, types: KernelTypes, sweep: tuple[Config, ...], pattern: str,
               vector: int = VECTOR) -> list[Config]:
    """The sweep's valid configs for a problem, with split-K variants up to 4 waves of CTAs."""
    p = Problem(m, n, k, types, pattern, vector)

    def tailed(base: Config) -> list[Config]:  # only the last partial wave split, where that saves waves
        tail = tail_split_for(base, p)
        return [] if tail is None else [replace(base, split_k=tail, split_reduce=3)]

    def variants():
        for base in sweep:
            tiles = -(-n // base.block_rows) * -(-m // base.block_tokens)
            for split in (1, 2, 3, 4):  # 3: e.g. 86 CTAs (11008 rows / 128) x 3 = 1.95 waves of 132
                if split > 1 and tiles * split > 4 * SMS:
                    break
                for reduce in (0, 1, 2) if split > 1 else (0,):  # split sums: second pass, atomics, or in a cluster
                    yield replace(base, split_k=split, split_reduce=reduce)
            yield from tailed(base)
        if m <= 256 and sweep is SWEEP:  # k_warps tiles won only there (ab_nm_simt_kwarps_e52fed1.json)
            for base in KWARPS:
                yield from (base, replace(base, split_k=2, split_reduce=2), *tailed(base))

    out: list[Config] = []
    for cfg in variants():
        if FAMILY.check(cfg, p) is None and cfg not in out:
            out.append(cfg)
    heur = FAMILY.heuristic(p)
    return out + ([heur] if heur not in out else [])


def reference(x: torch.Tensor, w) -> torch.Tensor:
    """fp64 x·Wᵀ of the first 64 tokens."""
    return x[:64].double() @ w.to_dense().double().T


def rel_err(kern, x: torch.Tensor, w, y: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative error of the first 64 tokens (NaN-poisoned output) against the fp64 reference."""
    y.fill_(float("nan"))
    kern(x, w, None, y)
    return ((y[: ref.shape[0]].double() - ref).norm() / ref.norm()).item()


def _dense_call(xs: list[torch.Tensor], wd: list[torch.Tensor], ys: list[torch.Tensor]):
    """cuBLAS on input set i (x and the dense weight rotated, y per set)."""
    return lambda i: torch.mm(xs[i % len(xs)], wd[i % len(wd)].T, out=ys[i])


def _kernel_call(kern, xs: list[torch.Tensor], ws: list, ys: list[torch.Tensor]):
    """An nm_simt kernel on input set i."""
    return lambda i: kern(xs[i % len(xs)], ws[i % len(ws)], None, ys[i])


def bench_nk(n: int, k: int, tokens: tuple[int, ...], patterns: tuple[str, ...], dtypes: tuple[str, ...],
             sweep: tuple[Config, ...], reps: int, rounds: int = 3, vector: int = VECTOR) -> list[dict]:
    rows: list[dict] = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for dname in dtypes:
        dt = torch.float32 if dname == "f32" else torch.float16
        types = TYPES[dname]
        dense_copies = copies_to_rotate(n * k * dt.itemsize)
        wd = [torch.randn(n, k, device="cuda", dtype=dt, generator=g) for _ in range(dense_copies)]
        for pattern in patterns:
            p = Pattern.parse(pattern)
            w0 = compress_nm(wd[0], p, vector, prune=True)
            wbytes = w0.values.numel() * 4 + w0.indices.numel()
            wcopies = copies_to_rotate(wbytes)
            ws = [w0] + [compress_nm(wd[i % dense_copies], p, vector, prune=True) for i in range(1, wcopies)]
            for m in tokens:
                xcopies = copies_to_rotate(m * k * dt.itemsize + n * k * dt.itemsize)
                xs = [torch.randn(m, k, device="cuda", dtype=dt, generator=g) for _ in range(xcopies)]
                base = {"m": m, "n": n, "k": k, "dtype": dname}
                key = (m, n, k, dname)
                heur = FAMILY.heuristic(Problem(m, n, k, types, pattern, vector))
                if key not in _DENSE:  # the dense baseline once per shape and dtype
                    ys = [torch.empty(m, n, device="cuda", dtype=dt) for _ in range(max(xcopies, dense_copies))]
                    copies = max(xcopies, dense_copies)
                    t = time_rotating(_dense_call(xs, wd, ys), copies, reps=reps, warmup_ms=50)
                    _DENSE[key] = t.p50_ms
                    impl = "cublas_sgemm_tf32_off" if dname == "f32" else "cublas_fp16"
                    rows.append({**base, "impl": impl, "median_ms": t.p50_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms,
                                 "tflops": 2 * m * n * k / t.p50_ms / 1e9})
                    print(json.dumps(rows[-1]), flush=True)
                dense_ms = _DENSE[key]
                copies = max(xcopies, wcopies)
                ys = [torch.empty(m, n, device="cuda", dtype=dt) for _ in range(copies)]
                timed = []
                # fp16 rows reuse the fp32 winner, and a pattern of a density already swept (2:4 after 16:32)
                # reuses that winner: both run the same k-tiles (no sweep)
                win = _WINNERS.get((m, n, k, pattern)) or _WINNERS.get((m, n, k, p.density))
                todo = [win] if win else candidates(m, n, k, types, sweep, pattern, vector)
                if time.time() > _DEADLINE[0]:  # past --budget-s: the heuristic only
                    todo = [heur]
                ref = reference(xs[0], ws[0])
                for cfg in todo:
                    kern = get_kernel((FAMILY.name, cfg, types))
                    try:
                        err = rel_err(kern, xs[0], ws[0], ys[0], ref)
                        if not err < (1e-5 if dname == "f32" else 2e-3):  # a wrong config is never reported
                            print(f"  reject {cfg}: rel err {err:.2e}", flush=True)
                            continue
                        t = time_rotating(_kernel_call(kern, xs, ws, ys), copies, reps=reps, warmup_ms=20)
                    except Exception as exc:  # a config the GPU refuses (shared memory) is skipped
                        print(f"  skip {cfg}: {exc}", flush=True)
                        continue
                    timed.append((t, cfg, err))
                if not timed:
                    print(f"  no config ran {m}x{n}x{k} {pattern} {dname}", flush=True)
                    continue
                best_t, best_cfg, best_err = min(timed, key=lambda r: r[0].p50_ms)
                if dname == "f32":
                    _WINNERS[(m, n, k, pattern)] = best_cfg
                    _WINNERS.setdefault((m, n, k, p.density), best_cfg)
                heur_t = next((r[0] for r in timed if r[1] == heur), None)
                # the reported ratio: cuBLAS and the winner timed in alternating rounds, so a clock that drifts
                # during the run (thermal slowdown) moves both sides of each round's ratio alike
                dense, sparse = _dense_call(xs, wd, ys), _kernel_call(get_kernel((FAMILY.name, best_cfg, types)),
                                                                      xs, ws, ys)
                timings = [(time_rotating(dense, copies, reps=reps, warmup_ms=20).p50_ms,
                            time_rotating(sparse, copies, reps=reps, warmup_ms=20).p50_ms) for _ in range(rounds)]
                ms = statistics.median(s for _, s in timings)
                for label, t, cfg, err in (("nm_simt_tuned", best_t, best_cfg, best_err),):
                    speedup = statistics.median(d / s for d, s in timings)
                    rows.append({**base, "impl": label, "pattern": pattern, "sparsity": p.sparsity,
                                 "ideal_speedup": p.m / p.n, "median_ms": ms,
                                 "sweep_p20_ms": t.p20_ms, "sweep_p50_ms": t.p50_ms, "sweep_p80_ms": t.p80_ms,
                                 "dense_ms": statistics.median(d for d, _ in timings), "dense_first_ms": dense_ms,
                                 "rounds": [{"dense_ms": d, "ms": s} for d, s in timings],
                                 f"speedup_vs_{'sgemm' if dname == 'f32' else 'cublas_fp16'}": speedup,
                                 "pct_of_ideal": 100 * speedup / (p.m / p.n),
                                 "tflops_effective": 2 * m * n * k * p.density / ms / 1e9,
                                 "heuristic_ms": heur_t.p50_ms if heur_t else None,
                                 "configs_timed": len(timed), "tuned_by_sweep": len(timed) > 1,
                                 "sweep": [{"config": c.to_record(), "median_ms": tt.p50_ms} for tt, c, _ in timed],
                                 "config_source": "sweep" if len(timed) > 1 else "heuristic (past --budget-s)"
                                 if cfg == heur and not win else "winner of the same density (fp32 sweep)",
                                 "config": cfg.to_record(),
                                 "rel_err": err})
                    print(json.dumps(rows[-1]), flush=True)
                del xs, ys, ref
            del ws
        del wd
        torch.cuda.empty_cache()
    return rows


_DENSE: dict[tuple, float] = {}
_WINNERS: dict[tuple, Config] = {}
_DEADLINE = [float("inf")]


def summary(rows: list[dict]) -> dict:
    """Mean speedup per sparsity level and pattern (fp32 vs SGEMM), as % of the ideal M/N."""
    out: dict = {}
    for dname, key in (("f32", "speedup_vs_sgemm"), ("f16", "speedup_vs_cublas_fp16")):
        sel = [r for r in rows if r.get("dtype") == dname and key in r]
        by: dict[str, list[dict]] = {}
        for r in sel:
            by.setdefault(r["pattern"], []).append(r)
        out[dname] = {pat: {"sparsity": rs[0]["sparsity"], "ideal": rs[0]["ideal_speedup"], "shapes": len(rs),
                            "mean_speedup": statistics.fmean(r[key] for r in rs),
                            "mean_pct_of_ideal": statistics.fmean(r["pct_of_ideal"] for r in rs),
                            "best": max(rs, key=lambda r: r[key])[key], "worst": min(rs, key=lambda r: r[key])[key],
                            "max_rel_err": max(r["rel_err"] for r in rs)}
                      for pat, rs in by.items()}
    return out


def markdown(result: dict) -> str:
    env = result["environment"]
    lines = [f"# nm_simt: general N:M on CUDA cores vs cuBLAS ({env.get('gpu')})", "",
             f"driver {env.get('driver')}, nvcc {env.get('nvcc')}, commit {env.get('commit')}", "",
             f"`{env.get('command')}`", "",
             "fp32: speedup over cuBLAS SGEMM with TF32 off; fp16 rows: fp16 in, fp32 accumulate, vs cuBLAS fp16 "
             "(reference only). Best config of a per-shape sweep (tuned_by_sweep). Ideal = M/N.", "",
             "| dtype | pattern | sparsity | shapes | mean speedup | ideal | mean % of ideal | best | worst | "
             "max rel err |", "|---|---|---|---|---|---|---|---|---|---|"]
    for dname, pats in result["summary"].items():
        for pat, s in pats.items():
            lines.append(f"| {dname} | {pat} | {s['sparsity']:.1%} | {s['shapes']} | {s['mean_speedup']:.2f}x | "
                         f"{s['ideal']:.0f}x | {s['mean_pct_of_ideal']:.0f}% | {s['best']:.2f}x | "
                         f"{s['worst']:.2f}x | {s['max_rel_err']:.1e} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--quick", action="store_true", help="2 shapes x 4 patterns, fp32 only")
    ap.add_argument("--patterns", help="comma-separated (default: the issue's eight)")
    ap.add_argument("--tokens", help="comma-separated m values")
    ap.add_argument("--dtypes", default="f32,f16")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--sweep", type=int, help="use only the first N base configs of the sweep")
    ap.add_argument("--budget-s", type=float, help="after this many seconds, time the heuristic config only")
    ap.add_argument("--vector", type=int, default=VECTOR, help="rows sharing kept positions (default: 32)")
    ap.add_argument("--compact", action="store_true",
                    help="sweep the compact (listed xᵀ rows) configs and the TMA winners only")
    ap.add_argument("--fuse", action="store_true", help="add each TMA config's fuse_x twin to the sweep")
    ap.add_argument("--winners", action="store_true",
                    help="sweep only the TMA configs that won most 87.5 %% and 75 %% rows at f1a17b1 (A/B runs)")
    ap.add_argument("--long", action="store_true", help="add the longer k-tiles (_LONG) to the sweep (with --winners)")
    ap.add_argument("--heuristic", action="store_true", help="no sweep: time the family's heuristic config only")
    ap.add_argument("--precompile", action="store_true", help="build the sweep's kernels (no GPU needed) and exit")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating cuBLAS / winner timings behind each reported ratio (median of the rounds)")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # SGEMM baseline: true fp32
    torch.backends.cudnn.allow_tf32 = False
    patterns = tuple(args.patterns.split(",")) if args.patterns else PATTERNS
    tokens = tuple(int(t) for t in args.tokens.split(",")) if args.tokens else TOKENS
    nks = LLAMA_NK
    dtypes = tuple(args.dtypes.split(","))
    if args.quick:
        patterns = patterns if args.patterns else ("16:32", "2:4", "4:32", "1:8")
        tokens = tokens if args.tokens else (256, 2048)
        nks, dtypes = (LLAMA_NK[0], LLAMA_NK[2]), ("f32",)
    sweep = COMPACT_SWEEP + TMA_WINNERS if args.compact else SWEEP[: args.sweep] if args.sweep else SWEEP
    sweep = TMA_WINNERS if args.winners else () if args.heuristic else sweep
    if args.long:  # SWEEP ends with _LONG's TMA variants
        sweep += tuple(c for c in SWEEP[-len(_LONG):] if c not in sweep)
    if args.fuse:  # beside every config with a producer warpgroup, its fuse_x twin (x transposed inside the GEMM)
        sweep += tuple(Config(**{**c.to_record(), "fuse_x": 1}) for c in sweep if own_producer(c))
    t0 = time.time()
    _DEADLINE[0] = t0 + args.budget_s if args.budget_s else float("inf")
    # fp16 rows run one of the fp32 candidates
    kids = {(FAMILY.name, c, TYPES[d]) for d in dtypes for n, k in nks for m in tokens
            for pat in patterns for c in candidates(m, n, k, TYPES["f32"], sweep, pat, args.vector)}
    bad = [r for r in precompile(sorted(kids, key=str)) if isinstance(r, Exception)]
    print(f"compiled {len(kids)} kernels in {time.time() - t0:.0f} s, {len(bad)} failed", flush=True)
    for r in bad[:3]:
        print("  ", str(r)[:500], flush=True)
    if args.precompile:
        return
    rows: list[dict] = []
    for n, k in nks:
        rows += bench_nk(n, k, tokens, patterns, dtypes, sweep, args.reps, max(1, args.rounds), args.vector)
        result = {"environment": environment(), "tf32": torch.backends.cuda.matmul.allow_tf32, "rows": rows,
                  "summary": summary(rows), "wall_s": time.time() - t0}
        if args.out:  # after each (n, k): a run cut short keeps its rows
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1))
            args.out.with_suffix(".md").write_text(markdown(result) + "\n")
    print(markdown(result), flush=True)


if __name__ == "__main__":
    main()

"""Energy-optimal vs time-optimal sm90 2:4 configs on the H100 (issue 9). Clocks and power limits untouched.

    python3 benchmarks/bench_energy.py --out benchmarks/results/h100/energy.json

The kernels in KERNELS compile once, in parallel, and serve all three problems; each also runs with a second
raster swizzle (runtime-only), so 2 x len(KERNELS) configs per problem. Each config is timed (CUDA-graph replays,
inputs rotated past L2, median) and its energy read from NVML's counter over >= ENERGY_MS of the same replays,
in the isolated worker. The time-best and the few energy-best configs are measured a second time and the two
readings averaged. cuBLAS dense is timed and metered in the same run. The energy model's held-out error is a
5-fold cross-validation over every measured (problem, config).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch

from cutlass_nm.bench.energy import energy_rotating, open_meter
from cutlass_nm.bench.env import environment
from cutlass_nm.bench.timing import copies_to_rotate, time_rotating
from cutlass_nm.build.resources import resource_usage
from cutlass_nm.families import KernelTypes, Problem, get_family
from cutlass_nm.kernels import precompile
from cutlass_nm.tune.energymodel import Sample, kfold_error
from cutlass_nm.tune.worker import MeasureWorker

PROBLEMS = [(8192, 8192, 8192), (2048, 11008, 4096), (256, 4096, 4096)]
ENERGY_MS = 200.0
# tile_m, tile_n, tile_k, cluster_m, cluster_n, schedule, stages, scheduler
KERNELS = [
    (256, 128, 128, 1, 2, "cooperative", 0, "persistent"), (256, 128, 128, 1, 1, "cooperative", 0, "persistent"),
    (256, 128, 64, 1, 2, "cooperative", 0, "persistent"), (128, 256, 64, 1, 2, "cooperative", 0, "persistent"),
    (128, 128, 128, 1, 2, "cooperative", 0, "persistent"), (128, 128, 64, 1, 1, "cooperative", 0, "persistent"),
    (128, 64, 128, 1, 1, "cooperative", 0, "persistent"), (128, 64, 128, 2, 1, "cooperative", 0, "persistent"),
    (128, 128, 64, 1, 2, "pingpong", 0, "persistent"), (128, 64, 128, 1, 1, "pingpong", 0, "persistent"),
    (256, 128, 128, 1, 2, "cooperative", 2, "persistent"), (256, 128, 64, 1, 2, "cooperative", 3, "persistent"),
    (128, 128, 128, 1, 2, "cooperative", 2, "persistent"), (128, 256, 128, 1, 1, "cooperative", 0, "persistent"),
    (64, 128, 128, 1, 1, "pingpong", 0, "persistent"), (256, 128, 128, 1, 2, "cooperative", 0, "streamk"),
]
SWIZZLES = (1, 4)


def configs(fam) -> list:
    keys = ("tile_m", "tile_n", "tile_k", "cluster_m", "cluster_n", "schedule", "stages", "scheduler")
    return [fam.Config(**dict(zip(keys, k, strict=True))) for k in KERNELS]


def cublas_row(m: int, n: int, k: int, meter) -> dict:
    copies = copies_to_rotate((m * k + n * k) * 2)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(copies)]
    ws = [torch.randn(n, k, device="cuda", dtype=torch.float16) for _ in range(copies)]

    def fn(i):
        return torch.mm(xs[i], ws[i].T)

    row = {"p50_ms": time_rotating(fn, copies, reps=30, warmup_ms=50.0).p50_ms}
    if meter is not None:
        e = energy_rotating(fn, copies, meter, ENERGY_MS)
        row.update(joules=e.joules_per_call, avg_power_w=e.avg_power_w, sm_clock_mhz=e.sm_clock_mhz)
    return row


def summarize(rows: list[dict], cublas: dict) -> dict:
    ok = [r for r in rows if r.get("status") == "ok" and r.get("joules")]
    t_best = min(ok, key=lambda r: r["p50_ms"])
    e_best = min(ok, key=lambda r: r["joules"])
    within5 = min((r for r in ok if r["p50_ms"] <= 1.05 * t_best["p50_ms"]), key=lambda r: r["joules"])

    def pick(r: dict) -> dict:
        return {k: r[k] for k in ("config", "p50_ms", "joules", "avg_power_w", "sm_clock_mhz", "readings")}

    def versus(r: dict) -> dict:
        return {"energy_saved_pct": 100 * (1 - r["joules"] / t_best["joules"]),
                "time_lost_pct": 100 * (r["p50_ms"] / t_best["p50_ms"] - 1)}

    return {"time_optimal": pick(t_best), "energy_optimal": pick(e_best), "energy_optimal_vs_time_optimal":
            versus(e_best), "energy_optimal_within_5pct_time": pick(within5), "within_5pct_vs_time_optimal":
            versus(within5), "cublas": cublas,
            "time_optimal_vs_cublas": {"speedup": cublas["p50_ms"] / t_best["p50_ms"],
                                       "energy_ratio": t_best["joules"] / cublas["joules"] if cublas.get("joules")
                                       else None}}


def markdown(result: dict) -> str:
    lines = ["# Energy-optimal vs time-optimal sm90 2:4 configs (H100, clocks untouched)", "",
             f"`{result['command']}` — {result['environment'].get('gpu')}, driver "
             f"{result['environment'].get('driver')}, {result['configs_per_problem']} configs per problem, "
             f"energy from NVML over >= {ENERGY_MS:.0f} ms windows (two readings averaged for the finalists).", "",
             "| problem (m x n x k) | time-optimal config | ms | mJ/call | W | energy-optimal config | ms | mJ/call "
             "| W | energy saved | time lost | best within 5 % time: saved / lost | cuBLAS ms, mJ |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def name(c: dict) -> str:
        return (f"{c['tile_m']}x{c['tile_n']}x{c['tile_k']} c{c['cluster_m']}x{c['cluster_n']} "
                f"{c['schedule'][:4]} s{c['stages']} sw{c['swizzle']}{' sk' if c['scheduler'] == 'streamk' else ''}")

    for p in result["problems"]:
        s = p["summary"]
        t, e, v, w = s["time_optimal"], s["energy_optimal"], s["energy_optimal_vs_time_optimal"], \
            s["within_5pct_vs_time_optimal"]
        cb = s["cublas"]
        lines.append(f"| {p['m']} x {p['n']} x {p['k']} | {name(t['config'])} | {t['p50_ms']:.4f} | "
                     f"{t['joules'] * 1e3:.2f} | {t['avg_power_w']:.0f} | {name(e['config'])} | {e['p50_ms']:.4f} | "
                     f"{e['joules'] * 1e3:.2f} | {e['avg_power_w']:.0f} | {v['energy_saved_pct']:.1f} % | "
                     f"{v['time_lost_pct']:.1f} % | {w['energy_saved_pct']:.1f} % / {w['time_lost_pct']:.1f} % | "
                     f"{cb['p50_ms']:.4f}, {cb.get('joules', float('nan')) * 1e3:.2f} |")
    m = result["model"]
    lines += ["", f"Energy model (ridge on log watts, {m['samples']} samples, {m['folds']}-fold held-out): "
              f"mean abs error {m['mape_pct']:.1f} %, median {m['median_ape_pct']:.1f} % "
              f"(constant-power baseline: {m['baseline_const_power_mape_pct']:.1f} % / "
              f"{m['baseline_const_power_median_ape_pct']:.1f} %).", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--finalists", type=int, default=3)
    args = ap.parse_args()
    fam = get_family("sptc24_sm90")
    types = KernelTypes("f16", "f16", False)
    kernels = configs(fam)
    t0 = time.time()
    built = precompile([(fam.name, c, types) for c in kernels], workers=16)
    compile_s = time.time() - t0
    resources = {}
    for cfg, art in zip(kernels, built, strict=True):
        resources[cfg] = {"regs": 0, "static_smem": 0} if isinstance(art, Exception) else resource_usage(art.path)
    print(f"compiled {len(kernels)} kernels in {compile_s:.0f} s; failures: "
          f"{[str(a)[:200] for a in built if isinstance(a, Exception)]}", flush=True)
    meter = open_meter()
    worker = MeasureWorker()
    problems, samples = [], []
    try:
        for m, n, k in PROBLEMS:
            problem = Problem(m, n, k, types)
            cublas = cublas_row(m, n, k, meter)
            torch.cuda.empty_cache()
            rows = []
            for base, art in zip(kernels, built, strict=True):
                for sw in SWIZZLES:
                    cfg = dataclasses.replace(base, swizzle=sw)
                    if isinstance(art, Exception) or fam.check(cfg, problem) is not None:
                        rows.append({"config": cfg.to_record(), "status": "invalid_or_build_failed"})
                        continue
                    res = worker.measure(fam.name, cfg, types, (m, n, k), reps=30, energy_ms=ENERGY_MS)
                    res.pop("trace", None)
                    res.update(config=cfg.to_record(), **resources[base])
                    if res.get("joules"):
                        res["readings"] = [res["joules"]]
                    rows.append(res)
            ok = [r for r in rows if r.get("status") == "ok" and r.get("joules")]
            finalists = sorted(ok, key=lambda r: r["joules"])[:args.finalists]
            finalists += [min(ok, key=lambda r: r["p50_ms"])]
            for r in {id(r): r for r in finalists}.values():  # a second reading, averaged
                again = worker.measure(fam.name, fam.Config.from_record(r["config"]), types, (m, n, k), reps=30,
                                       energy_ms=ENERGY_MS)
                if again.get("status") == "ok" and again.get("joules"):
                    r["readings"].append(again["joules"])
                    r["joules"] = sum(r["readings"]) / len(r["readings"])
                    r["p50_ms"] = (r["p50_ms"] + again["p50_ms"]) / 2
                    r["avg_power_w"] = r["joules"] / (r["p50_ms"] * 1e-3)
            for r in ok:
                samples.append(Sample(m, n, k, r["config"], r["p50_ms"], r["joules"], r["regs"], r["static_smem"]))
            summary = summarize(rows, cublas)
            print(json.dumps({"problem": (m, n, k), **summary}), flush=True)
            problems.append({"m": m, "n": n, "k": k, "summary": summary, "rows": rows})
    finally:
        worker.close()
    result = {"environment": environment(), "command": "python3 benchmarks/bench_energy.py --out "
              "benchmarks/results/h100/energy.json", "compile_s": compile_s, "kernels": len(kernels),
              "configs_per_problem": len(kernels) * len(SWIZZLES), "energy_window_ms": ENERGY_MS,
              "nvml": meter is not None, "model": kfold_error(samples, folds=5) if len(samples) >= 10 else None,
              "problems": problems, "wall_s": time.time() - t0}
    print(json.dumps(result["model"]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
        args.out.with_suffix(".md").write_text(markdown(result))


if __name__ == "__main__":
    main()

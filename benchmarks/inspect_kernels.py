"""Which GPU kernels a 2:4 call launches: name, grid, block, cluster, shared memory and time, from torch.profiler.

    python3 benchmarks/inspect_kernels.py --shapes 8192x8192x8192,16384x4096x4096 [--config '{...}'] [--out f.json]

For each shape it runs cuSPARSELt after ``mm_search`` (``torch._cslt_sparse_mm`` on a contiguous xᵀ, as the
benchmarks time it) and, with ``--config``, our sptc24_sm90 kernel of that config, and prints what the profiler
saw. cuSPARSELt's kernel names spell out its tile, cluster and schedule; that is what our tuned configs compete
with.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

import cutlass_nm
from cutlass_nm.bench.energy import open_meter
from cutlass_nm.bench.timing import profile_calls
from cutlass_nm.families import KernelTypes, get_family
from cutlass_nm.kernels import get_kernel


def kernels_of(fn, calls: int = 5) -> list[dict]:
    """Kernel launches of ``fn()`` (after a warm-up), grouped by name."""
    prof = profile_calls(fn, calls, warmup=3)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    out: dict[str, dict] = {}
    for ev in events:
        if ev.get("cat") != "kernel":
            continue
        a = ev.get("args", {})
        row = out.setdefault(ev["name"], {"name": ev["name"], "grid": a.get("grid"), "block": a.get("block"),
                                          "cluster": a.get("cluster"), "shared_memory": a.get("shared memory"),
                                          "registers": a.get("registers per thread"), "us": []})
        row["us"].append(ev.get("dur"))
    for row in out.values():
        row["us"] = sorted(row["us"])[len(row["us"]) // 2]
    return list(out.values())


def power_of(fn, meter) -> dict | None:
    """Average power, SM clock and energy per call over a one-second loop of ``fn()`` (NVML, read only)."""
    if meter is None:
        return None
    e = meter.measure(fn, 1, torch.cuda.synchronize, min_ms=1000.0)
    return {"watts": round(e.avg_power_w, 1), "sm_mhz": e.sm_clock_mhz,
            "mj_per_call": round(e.joules_per_call * 1e3, 3), "ms_per_call": round(e.window_ms / e.calls, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="8192x8192x8192,16384x4096x4096,2048x11008x4096,2048x12288x4096")
    ap.add_argument("--config", action="append", default=[], help="JSON sptc24_sm90 config fields (repeatable)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    fam = get_family("sptc24_sm90")
    types = KernelTypes("f16", "f16", False)
    meter = open_meter()
    report = []
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        w = cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16))[0]
        comp = torch._cslt_compress(w.to_dense())
        xt = x.T.contiguous()
        alg, split_k, split_k_mode, _ = torch._C._cusparselt.mm_search(comp, xt, None, None, None, False)
        cslt = lambda c=comp, xt=xt, a=alg, s=split_k, sm=split_k_mode: torch._cslt_sparse_mm(  # noqa: E731
            c, xt, alg_id=a, split_k=s, split_k_mode=sm)
        entry = {"shape": [m, n, k], "cusparselt": {"alg": alg, "split_k": split_k, "split_k_mode": split_k_mode,
                 "kernels": kernels_of(cslt), "power": power_of(cslt, meter)}}
        ours = []
        for text in args.config:
            cfg = fam.Config.from_record({**fam.Config().to_record(), **json.loads(text)})
            kern = get_kernel((fam.name, cfg, types))
            y = torch.empty(m, n, device="cuda", dtype=torch.float16)
            run = lambda kern=kern, x=x, w=w, y=y: kern(x, w, None, y)  # noqa: E731
            ours.append({"config": cfg.to_record(), "kernels": kernels_of(run), "power": power_of(run, meter)})
        entry["ours"] = ours
        report.append(entry)
        print(f"== {shape}: cuSPARSELt alg {alg} split_k {split_k} mode {split_k_mode} {entry['cusparselt']['power']}")
        for kr in entry["cusparselt"]["kernels"]:
            print(f"   {kr['us']:8.1f} us grid {kr['grid']} block {kr['block']} cluster {kr['cluster']} "
                  f"smem {kr['shared_memory']} regs {kr['registers']}  {kr['name'][:200]}")
        for o in ours:
            for kr in o["kernels"]:
                print(f"   {kr['us']:8.1f} us grid {kr['grid']} block {kr['block']} cluster {kr['cluster']} "
                      f"smem {kr['shared_memory']} regs {kr['registers']}  ours {o['config']} {o['power']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

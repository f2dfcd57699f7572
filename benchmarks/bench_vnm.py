"""V:N:M (VENOM) SpMM on the GPU against cuBLAS dense fp16, timed in one run (issue 5).

    python3 benchmarks/bench_vnm.py --out benchmarks/results/h100/vnm.json

Every registered vnm_* family (or those in ``--families``) runs each row; vnm_sm90 also runs the configs in
``--sm90-configs`` (tile_m x tile_n x tile_k x stages x consumers [x transpose [x gather]]), vnm_sm80 those in
``--sm80-configs`` (tile_m x tile_n x tile_k x warp_m x warp_n x stages x swizzle; none: its heuristic through
matmul), each reported and the best. Our times include the per-call transpose of x (torch's ``x.t().contiguous()``
reported alone as ``transpose_ms``, for scale). Weights are random V:N:M weights (random 4 columns per block-group,
random 2:4 inside), rotated past L2 together with the inputs; CUDA-graph timing, median. ``--precompile`` builds
every row's kernels (the heuristic configs included) and exits: it needs nvcc, not a GPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import cutlass_nm
from cutlass_nm.bench.env import environment
from cutlass_nm.bench.timing import copies_to_rotate, time_rotating
from cutlass_nm.families import FAMILIES, KernelTypes
from cutlass_nm.formats.vnm import VNMWeight
from cutlass_nm.kernels import get_kernel, precompile
from cutlass_nm.patterns import Pattern

PATTERNS = ["128:2:8", "128:2:16"]
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 4096, 4096), (2048, 11008, 4096), (2048, 4096, 11008),
          (2048, 12288, 4096)]
SM90_CONFIGS = ["128x256x64x5x2", "128x256x64x5x2x1", "128x256x64x5x2x1x1", "128x256x64x4x2x1x1",
                "128x128x64x8x2x1x1"]
SM80_CONFIGS: list[str] = []
_PAIRS = torch.tensor([0 | 1 << 2, 0 | 2 << 2, 0 | 3 << 2, 1 | 2 << 2, 1 | 3 << 2, 2 | 3 << 2], dtype=torch.uint8)


def random_vnm(n: int, k: int, pattern: str, dtype=torch.float16) -> VNMWeight:
    """A random weight in the V:N:M format (no pruning search)."""
    p = Pattern.parse(pattern)
    g, b = -(-k // p.m), -(-n // p.v)
    cols = torch.rand(b, g, p.m, device="cuda").argsort(-1)[..., :4].sort(-1).values.to(torch.uint8)
    meta = _PAIRS.cuda()[torch.randint(0, 6, (n, g), device="cuda")]
    values = torch.randn(n, 2 * g, device="cuda", dtype=dtype)
    return VNMWeight(values, cols.contiguous(), meta.contiguous(), (n, k), p)


def _clone(w: VNMWeight) -> VNMWeight:
    return VNMWeight(w.values.clone(), w.columns.clone(), w.meta.clone(), w.shape, w.pattern)


def family_configs(name: str, specs: list[str]) -> list:
    """Configs of a family from 'AxBx...' specs, its Config fields in order."""
    cfg = FAMILIES[name].Config
    return [cfg.from_record(config_record(cfg, s)) for s in specs]


def config_record(cfg: type, spec: str) -> dict:
    """'AxBx...' -> a record of the first fields of ``cfg.SPACE`` (the rest keep their defaults)."""
    vals = [int(v) for v in spec.split("x")]
    keys = list(cfg.SPACE)
    if len(vals) > len(keys):
        raise ValueError(f"{spec}: more than the {len(keys)} fields {keys}")
    return dict(zip(keys, vals, strict=False))


def sm90_configs(specs: list[str]) -> list:
    return family_configs("vnm_sm90", specs)


def kernels_for(pattern: str, m: int, n: int, k: int, configs: list | dict[str, list],
                families: list[str] | None = None) -> dict[str, object]:
    """name -> launcher-like callable(x, w, y) for every vnm family (and each of its configs in ``configs``, a
    list for vnm_sm90 or a dict family -> configs); None means through matmul with the family's heuristic."""
    types = KernelTypes("f16", "f16", False)
    configs = configs if isinstance(configs, dict) else {"vnm_sm90": configs}
    out: dict[str, object] = {}
    for name in sorted(FAMILIES):
        if not name.startswith("vnm_") or (families is not None and name not in families):
            continue
        if configs.get(name):
            v = Pattern.parse(pattern).v
            for cfg in configs[name]:
                if v % cfg.tile_m == 0 and FAMILIES[name].check(cfg, _problem(m, n, k)) is None:
                    tag = "x".join(str(x) for x in cfg.to_record().values())
                    try:
                        out[f"{name}[{tag}]"] = get_kernel((name, cfg, types))
                    except Exception as exc:  # a failed build is reported, the row goes on
                        print(f"skip {tag}: {exc}", flush=True)
        else:
            out[name] = None  # through cutlass_nm.matmul (its own heuristic)
    return out


def _problem(m: int, n: int, k: int):
    from cutlass_nm.families import Problem

    return Problem(m, n, k, KernelTypes("f16", "f16", False))


def bench_row(pattern: str, m: int, n: int, k: int, configs: list | dict[str, list],
              families: list[str] | None = None) -> list[dict]:
    first = random_vnm(n, k, pattern)
    wbytes = first.values.numel() * 2 + first.meta.numel() + first.columns.numel()
    copies = copies_to_rotate(wbytes + m * k * 2)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(copies)]
    ws = [first] + [_clone(first) for _ in range(copies - 1)]
    dense = first.to_dense()
    dws = [dense] + [dense.clone() for _ in range(copies - 1)]
    t_dense = time_rotating(lambda i: torch.nn.functional.linear(xs[i], dws[i]), copies).p50_ms
    t_tr = time_rotating(lambda i: xs[i].t().contiguous(), copies).p50_ms
    ref = xs[0].double() @ dense.double().T
    dws.clear()
    rows = []
    for name, launcher in kernels_for(pattern, m, n, k, configs, families).items():
        ys = [torch.empty(m, n, device="cuda", dtype=torch.float16) for _ in range(copies)]
        if launcher is None:
            def run(i, name=name, ys=ys):
                return cutlass_nm.matmul(xs[i], ws[i], out=ys[i], family=name)
        else:
            def run(i, launcher=launcher, ys=ys):
                return launcher(xs[i], ws[i], None, ys[i])
        ys[0].fill_(float("nan"))
        run(0)
        err = ((ys[0].double() - ref).norm() / ref.norm()).item()
        t = time_rotating(run, copies)
        eff = 2 * m * n * k / (t.p50_ms * 1e-3) / 1e12
        rows.append({"pattern": pattern, "m": m, "n": n, "k": k, "kernel": name, "median_ms": t.p50_ms,
                     "p20_ms": t.p20_ms, "p80_ms": t.p80_ms, "cublas_ms": t_dense, "transpose_ms": t_tr,
                     "speedup_vs_cublas": t_dense / t.p50_ms, "dense_equiv_TFLOPs": eff, "rel_err": err,
                     "timing": t.method})
        print(json.dumps(rows[-1]), flush=True)
        ys.clear()
    return rows


def best_rows(rows: list[dict]) -> list[dict]:
    """Per (pattern, shape, family): the fastest config."""
    best: dict[tuple, dict] = {}
    for r in rows:
        key = (r["pattern"], r["m"], r["n"], r["k"], r["kernel"].split("[")[0])
        if key not in best or r["median_ms"] < best[key]["median_ms"]:
            best[key] = r
    return list(best.values())


def markdown(rows: list[dict], env: dict) -> str:
    lines = [f"# V:N:M SpMM vs cuBLAS dense fp16 ({env.get('gpu', '')})", "",
             "Best config per row; times include the per-call transpose of x; median of CUDA-graph replays, "
             "inputs and weights rotated past L2.", "",
             "| pattern | m | n | k | kernel | ms | cuBLAS ms | speedup | transpose ms | rel err |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in best_rows(rows):
        lines.append(f"| {r['pattern']} | {r['m']} | {r['n']} | {r['k']} | {r['kernel']} | {r['median_ms']:.4f} | "
                     f"{r['cublas_ms']:.4f} | {r['speedup_vs_cublas']:.2f}x | {r['transpose_ms']:.4f} | "
                     f"{r['rel_err']:.1e} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--sm90-configs", nargs="*", default=SM90_CONFIGS)
    ap.add_argument("--sm80-configs", nargs="*", default=SM80_CONFIGS)
    ap.add_argument("--families", nargs="*", help="vnm families to run (default: every registered one)")
    ap.add_argument("--shapes", type=int, default=len(SHAPES), help="run only the first N shapes")
    ap.add_argument("--mnk", nargs="*", help="shapes MxNxK instead of the default set")
    ap.add_argument("--patterns", nargs="*", default=PATTERNS)
    ap.add_argument("--precompile", action="store_true", help="build the rows' kernels (no GPU needed) and exit")
    args = ap.parse_args()
    wanted = [f for f in ("vnm_sm90", "vnm_sm80") if f in FAMILIES and (args.families is None or f in args.families)]
    specs = {"vnm_sm90": args.sm90_configs, "vnm_sm80": args.sm80_configs}
    configs = {f: family_configs(f, specs[f]) for f in wanted}
    types = KernelTypes("f16", "f16", False)
    kids = [(f, c, types) for f in wanted for c in configs[f]]
    shapes = [tuple(map(int, s.split("x"))) for s in args.mnk] if args.mnk else SHAPES[: args.shapes]
    if args.precompile:  # what matmul's heuristic picks for the rows of families without listed configs
        from cutlass_nm.families import Problem

        kids += [(f, FAMILIES[f].heuristic(Problem(m, n, k, types, pattern)), types) for f in wanted
                 if not configs[f] for m, n, k in shapes for pattern in args.patterns]
    failures = [r for r in precompile(kids) if isinstance(r, Exception)]
    for f in failures:
        print("build failed:", f, flush=True)
    if args.precompile:
        print(f"precompiled {len(set(kids))} kernels, {len(failures)} failed")
        return
    rows = []
    for m, n, k in shapes:
        for pattern in args.patterns:
            rows.extend(bench_row(pattern, m, n, k, configs, args.families))
    env = environment()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
        args.out.with_suffix(".md").write_text(markdown(rows, env))
    print(markdown(rows, env))


if __name__ == "__main__":
    main()

"""Measure the configs that ship in the package: every candidate of a family's shipping grid on every layer shape
of the "tune" models (``cutlass_nm.campaigns.split_models("tune")``), on this GPU, and write the best per problem.

    python3 tuning/ship_configs.py --family sptc24_sm90 --out cutlass_nm/configs/h100-80gb-hbm3.jsonl \\
        --measurements sptc24_grid.json                      # 1 GPU; compiles the grid on all cores first
    python3 tuning/ship_configs.py --family sptc24_sm90 --tokens 2048,8192 --out ... --append   # in parts
    python3 tuning/ship_configs.py --carry-over sptc24_sm90 --out cutlass_nm/configs/h100-80gb-hbm3.jsonl
    python3 tuning/ship_configs.py --family nm_decode --pattern 256:2:8 --fused-gate-up --tokens 1 --out ... --append

The held-out models never enter. The output file's header names, per family, the template hash its records are
valid for; ``--carry-over`` moves a family's records to this version's templates after a regression run showed
its kernels unchanged (``tests/test_shipped_records.py`` fails until one of the two is done). ``--measurements``
keeps every timed candidate (the suite's row schema) for validating the config model.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import uuid
from pathlib import Path

GRID = {  # family -> candidate configs (fields not named take the Config defaults); small m first
    "sptc24_sm90": [
        dict(tile_m=128, tile_n=64, tile_k=128, cluster_m=2, cluster_n=1, mma_pipe=1),
        dict(tile_m=128, tile_n=64, tile_k=128, cluster_m=1, cluster_n=1, raster="n", swizzle=8, mma_pipe=1),
        dict(tile_m=128, tile_n=64, tile_k=128, cluster_m=1, cluster_n=1, scheduler="streamk", mma_pipe=1),
        dict(tile_m=128, tile_n=64, tile_k=128, cluster_m=2, cluster_n=1, scheduler="streamk", mma_pipe=1),
        dict(tile_m=256, tile_n=64, tile_k=128, cluster_m=1, cluster_n=2),
        dict(tile_m=128, tile_n=64, tile_k=64, cluster_m=1, cluster_n=1, schedule="pingpong", mma_pipe=1),
        dict(tile_m=64, tile_n=64, tile_k=128, cluster_m=1, cluster_n=1, schedule="pingpong", mma_pipe=1),
        dict(tile_m=64, tile_n=128, tile_k=64, cluster_m=2, cluster_n=1, schedule="pingpong", mma_pipe=1),
        dict(tile_m=128, tile_n=128, tile_k=64, cluster_m=1, cluster_n=1, scheduler="streamk", mma_pipe=1),
        dict(tile_m=128, tile_n=128, tile_k=128, cluster_m=1, cluster_n=1, mma_pipe=1),
        dict(tile_m=128, tile_n=128, tile_k=64, cluster_m=2, cluster_n=1, raster="n", swizzle=8, mma_pipe=1),
        dict(tile_m=128, tile_n=128, tile_k=64, cluster_m=2, cluster_n=1, scheduler="streamk", mma_pipe=1),
        dict(tile_m=64, tile_n=256, tile_k=64, cluster_m=1, cluster_n=1, schedule="pingpong", mma_pipe=1),
        dict(tile_m=256, tile_n=128, tile_k=64, cluster_m=1, cluster_n=2, mma_pipe=1),
        dict(tile_m=256, tile_n=128, tile_k=64, cluster_m=1, cluster_n=1, raster="n", swizzle=8, mma_pipe=1),
        dict(tile_m=256, tile_n=128, tile_k=64, cluster_m=2, cluster_n=1, scheduler="streamk", mma_pipe=1),
        dict(tile_m=128, tile_n=256, tile_k=64, cluster_m=2, cluster_n=1, raster="n", swizzle=8, mma_pipe=1),
        dict(tile_m=128, tile_n=256, tile_k=64, cluster_m=2, cluster_n=2, mma_pipe=1),
        dict(tile_m=128, tile_n=256, tile_k=64, cluster_m=2, cluster_n=1, scheduler="streamk", raster="m",
             mma_pipe=1),
        dict(tile_m=128, tile_n=256, tile_k=64, cluster_m=1, cluster_n=1, raster="n", swizzle=8, mma_pipe=1),
        dict(tile_m=128, tile_n=256, tile_k=64, cluster_m=1, cluster_n=2, raster="n", mma_pipe=1),
    ],
    "vnm_sm90": [
        dict(tile_m=64, tile_n=64, tile_k=128, stages=6),
        dict(tile_m=64, tile_n=128, tile_k=64, stages=6),
        dict(tile_m=128, tile_n=64, tile_k=128, stages=5, consumers=2),
        dict(tile_m=128, tile_n=128, tile_k=64, stages=8, consumers=2),
        dict(tile_m=128, tile_n=128, tile_k=64, stages=8, consumers=2, raster=1),
        dict(tile_m=128, tile_n=128, tile_k=128, stages=4, consumers=2),
        dict(tile_m=128, tile_n=256, tile_k=64, stages=5, consumers=2),
        dict(tile_m=128, tile_n=256, tile_k=64, stages=5, consumers=2, raster=1),
        dict(tile_m=128, tile_n=256, tile_k=64, stages=5, consumers=2, cluster=2),
        dict(tile_m=128, tile_n=256, tile_k=64, stages=5, consumers=2, mma_pipe=1),
    ],
    "sptc24_fp8_sm90": [  # tile_k in e4m3 elements: 128 of them are the 16-bit family's 64 in bytes
        dict(tile_m=128, tile_n=64, tile_k=256, cluster_m=2, cluster_n=1),
        dict(tile_m=128, tile_n=64, tile_k=256, raster="n", swizzle=8),
        dict(tile_m=64, tile_n=64, tile_k=256, schedule="pingpong"),
        dict(tile_m=128, tile_n=64, tile_k=128, schedule="pingpong"),
        dict(tile_m=128, tile_n=128, tile_k=256),
        dict(tile_m=128, tile_n=128, tile_k=128, cluster_m=2, cluster_n=1, raster="n", swizzle=8),
        dict(tile_m=256, tile_n=128, tile_k=128, cluster_n=2),
        dict(tile_m=256, tile_n=128, tile_k=128, raster="n", swizzle=8),
        dict(tile_m=128, tile_n=256, tile_k=128, cluster_m=2, cluster_n=1, raster="n", swizzle=8),
        dict(tile_m=128, tile_n=256, tile_k=128, cluster_m=2, cluster_n=2),
        dict(tile_m=128, tile_n=256, tile_k=128, raster="n", swizzle=8),
    ],
    "decode24": [  # one token (--tokens 1): warps x rows a warp x chunks in flight, and the split-K rule's rivals
        *(dict(max_tokens=1, warps=w, rows=r, ahead=a) for w in (4, 8, 16) for r in (1, 2) for a in (1, 2)),
        *(dict(max_tokens=1, warps=w, rows=r, ahead=1, split=s) for w, r in ((8, 1), (4, 2)) for s in (1, 2, 4)),
        *(dict(max_tokens=1, warps=w, rows=r, ahead=1, transpose=1) for w, r in ((8, 1), (4, 2))),
        dict(max_tokens=1, warps=8, rows=1, ahead=1, max_ctas=2),
    ],
    "nm_decode": [  # V:N:M at one token (--tokens 1, mode 3): warps, steps in flight, warps a 32-row block, split-K
        *(dict(max_tokens=1, mode=3, warps=8, ahead=1, wsplit=8, split=s, ctas=c, push=1)
          for s in (0, 1, 2, 4, 8) for c in (3, 4)),
        dict(max_tokens=1, mode=3, warps=8, ahead=2, wsplit=8, ctas=3, push=1),
        dict(max_tokens=1, mode=3, warps=8, ahead=2, wsplit=4, ctas=4, push=1),
        dict(max_tokens=1, mode=3, warps=4, ahead=2, wsplit=4, ctas=4, push=1),
        dict(max_tokens=1, mode=3, warps=16, ahead=1, wsplit=8, ctas=2, push=1),
        dict(max_tokens=1, mode=3, warps=16, ahead=2, wsplit=8, push=1),
        dict(max_tokens=1, mode=3, warps=8, ahead=1, wsplit=8, ctas=3, push=1, early_release=1),
        dict(max_tokens=1, mode=3, warps=8, ahead=2, ctas=3, push=1),
        dict(max_tokens=8, mode=3, warps=8, ahead=2, ctas=3, push=1),  # the heuristic below 2^24 weights
    ],
}
TOKENS = (16, 128, 512, 2048, 8192)  # the GEMM families' token counts (m = 1 runs on the decode path)


def candidates(family, m: int, all_tiles: bool = False, vary: dict[str, list] | None = None) -> list:
    """The grid's configs worth timing at ``m`` tokens: token tiles no wider than m (64 at least), and at least 128
    wide from m = 2048 on, where narrow token tiles only add waves (``all_tiles``: every one). ``vary``: each
    config once per value of these fields (e.g. ``{"fast_accum": [0, 1]}``)."""
    import dataclasses
    import itertools

    cfgs = [family.Config.from_record({**family.Config().to_record(), **c}) for c in GRID[family.name]]
    if not all_tiles and hasattr(family.Config, "tile_n"):  # a GEMM's token tiles
        cfgs = [c for c in cfgs if c.tile_n <= max(64, m) and not (m >= 2048 and c.tile_n < 128)]
    if vary:
        cfgs = [dataclasses.replace(c, **dict(zip(vary, values, strict=True)))
                for c in cfgs for values in itertools.product(*vary.values())]
    return list(dict.fromkeys(cfgs))


def kernel_types(dtype: str):
    """The kernel types a shipped problem of ``dtype`` inputs runs: its own output dtype; e4m3 writes bf16."""
    from cutlass_nm.families import KernelTypes

    return KernelTypes(dtype, "bf16" if dtype == "e4m3" else dtype, False)


def problems(family, tokens: tuple[int, ...], pattern: str, dtype: str, fused_gate_up: bool = False):
    """The tune models' layer problems at each token count; ``fused_gate_up``: their MLPs' gate and up as one
    weight of twice gate's rows instead (a ``SparseGatedMLP``'s 256:2:M weight at decode sizes)."""
    from cutlass_nm.campaigns import load_models, split_models, split_shapes
    from cutlass_nm.families import Problem

    if fused_gate_up:
        models = load_models()
        shapes = sorted({(m, 2 * n, k) for name in split_models("tune") for layer, n, k in models[name]
                         if layer == "gate_proj" for m in tokens})
    else:
        shapes = split_shapes("tune", tokens)
    return [Problem(m, n, k, kernel_types(dtype), pattern) for m, n, k in shapes]


def inputs(p, copies: int, seed: int, weights: int = 1) -> tuple[list, list, list, list[tuple], object]:
    """x copies, ``weights`` weights (each drawn anew), y copies, the launcher's arguments after
    y (FP8: x's per-token scales) and the fp32 reference of the first x on the weight. FP8 operands are drawn in
    bf16 and quantized."""
    import torch

    import cutlass_nm
    from cutlass_nm.formats.fp8 import dequantize_rows, quantize_rows

    fp8 = p.types.dtype == "e4m3"
    dt = torch.bfloat16 if fp8 else {"f16": torch.float16, "bf16": torch.bfloat16}[p.types.dtype]
    g = torch.Generator(device="cuda").manual_seed(seed)
    ws = [cutlass_nm.prune(torch.randn(p.n, p.k, device="cuda", dtype=dt, generator=g), p.pattern,
                            dtype=torch.float8_e4m3fn if fp8 else None)[0] for _ in range(weights)]
    w = ws[0]
    xs = [torch.randn(p.m, p.k, device="cuda", dtype=dt, generator=g) for _ in range(copies)]
    extra: list[tuple] = [() for _ in xs]
    if fp8:
        quantized = [quantize_rows(x) for x in xs]
        xs, extra = [q for q, _ in quantized], [(s,) for _, s in quantized]
    out = torch.bfloat16 if fp8 else dt
    ys = [torch.empty(p.m, p.n, device="cuda", dtype=out) for _ in range(copies)]
    x0 = dequantize_rows(xs[0], extra[0][0]) if fp8 else xs[0].float()
    return xs, ws, ys, extra, x0 @ w.to_dense().float().T


def default_choice(family, p) -> tuple:
    """(family, config, source) the default path runs ``p`` with, without a user DB: dispatch's family for the
    problem's m (a decode family at small m) and the config the shipped configs, the config model or the heuristic
    give it."""
    from cutlass_nm.dispatch import default_choice as choose
    from cutlass_nm.formats import weight_class
    from cutlass_nm.formats.fp8 import Sparse24FP8Weight
    from cutlass_nm.patterns import Pattern
    from cutlass_nm.store.chooser import default_chooser

    kind = Sparse24FP8Weight if p.types.dtype == "e4m3" else weight_class(Pattern.parse(p.pattern))
    fam, cfg, source, _ = choose(p, kind, default_chooser(db=False))
    return fam, cfg, source


def measure(family, probs: list, reps: int, log, with_default: bool = False, grid: dict | None = None) -> list[dict]:
    """Every runnable candidate on every problem: rows {m, n, k, config, p20/p50/p80_ms, rel_err}. ``with_default``:
    also the default path's choice (``default_choice``; its family may be a decode family), marked ``default``."""
    from cutlass_nm.kernels import get_kernel
    from cutlass_nm.timing import copies_to_rotate, time_rotating

    rows = []
    for i, p in enumerate(probs):
        t0 = time.time()
        copies = copies_to_rotate((p.m * p.k + p.m * p.n) * 2)
        # a few tokens stream the weight: it rotates past L2 too (its compressed bytes, about half its dense ones)
        weights = copies_to_rotate(p.n * p.k) if p.m <= 16 else 1
        copies = max(copies, weights)
        xs, ws, ys, extra, ref = inputs(p, copies, seed=i, weights=weights)
        runs = [(family, cfg, None) for cfg in candidates(family, p.m, **(grid or {}))]
        if with_default:
            fam, cfg, source = default_choice(family, p)
            runs = [r for r in runs if (r[0].name, r[1]) != (fam.name, cfg)] + [(fam, cfg, source)]
        for fam, cfg, source in runs:
            if fam.check(cfg, p) is not None:
                continue
            kern = get_kernel((fam.name, cfg, p.types))
            ys[0].fill_(float("nan"))
            kern(xs[0], ws[0], None, ys[0], *extra[0])
            err = ((ys[0].float() - ref).norm() / ref.norm()).item()
            if not err < 1e-2:
                log(f"  wrong result ({err}) for {cfg}; skipped")
                continue
            def run(j, kern=kern, xs=xs, ws=ws, ys=ys, extra=extra):
                return kern(xs[j], ws[j % len(ws)], None, ys[j], *extra[j])

            t = time_rotating(run, copies, reps=reps, warmup_ms=25)
            rows.append({"family": fam.name, "pattern": p.pattern, "dtype": p.types.dtype, "m": p.m, "n": p.n,
                         "k": p.k, "config": cfg.to_record(), "median_ms": t.p50_ms, "p20_ms": t.p20_ms,
                         "p80_ms": t.p80_ms, "reps": t.reps, "timing": t.method, "rel_err": err,
                         **({"default": True, "config_source": source} if source else {})})
        best = min((r for r in rows if (r["m"], r["n"], r["k"]) == (p.m, p.n, p.k)), key=lambda r: r["median_ms"],
                   default=None)
        log(f"[{i + 1}/{len(probs)}] {p.m}x{p.n}x{p.k}: best {best and best['median_ms'] * 1e3:.1f} us "
            f"({time.time() - t0:.1f} s)")
    return rows


def parse_vary(family, specs: list[str] | None) -> dict[str, list]:
    """``["field=v1,v2", ...]`` as ``{field: [values]}``, each value of the family's config space."""
    out: dict[str, list] = {}
    space = family.space()
    for spec in specs or []:
        name, _, values = spec.partition("=")
        if name not in space:
            raise SystemExit(f"--vary: {family.name} has no field {name!r} (fields: {', '.join(space)})")
        kind = type(space[name][0])
        vals = [kind(v) for v in values.split(",") if v]
        if not vals or any(v not in space[name] for v in vals):
            raise SystemExit(f"--vary {name}: values must be of {space[name]}, got {values!r}")
        out[name] = vals
    return out


def default_vs_best(rows: list[dict]) -> list[str]:
    """A line per problem: the default path's time over the best measured one (1.00: the default is the best)."""
    lines = []
    for key in sorted({(r["m"], r["n"], r["k"], r["pattern"]) for r in rows}):
        mine = [r for r in rows if (r["m"], r["n"], r["k"], r["pattern"]) == key]
        best = min(mine, key=lambda r: r["median_ms"])
        default = next((r for r in mine if r.get("default")), None)
        if default is None:
            lines.append(f"{key[3]} {key[0]}x{key[1]}x{key[2]}: the default config did not run")
            continue
        lines.append(f"{key[3]} {key[0]}x{key[1]}x{key[2]}: default ({default['family']}, "
                     f"{default['config_source']}) {default['median_ms'] * 1e3:.1f} us, best of {len(mine)} "
                     f"{best['median_ms'] * 1e3:.1f} us: {default['median_ms'] / best['median_ms']:.3f}x")
    return lines


def records(family, rows: list[dict], study: str) -> list[dict]:
    """The best row per problem as an export record (``cutlass-nm db export``'s form)."""
    from cutlass_nm.families import Problem
    from cutlass_nm.store.fingerprint import ProblemKey, current_environment

    env = current_environment(family.name)
    best: dict[tuple, dict] = {}
    for r in rows:
        key = (r["m"], r["n"], r["k"], r["pattern"], r["dtype"])
        if key not in best or r["median_ms"] < best[key]["median_ms"]:
            best[key] = r
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    out = []
    for (m, n, k, pattern, dtype), r in sorted(best.items()):
        pk = ProblemKey.of(family.name, Problem(m, n, k, kernel_types(dtype), pattern))
        out.append({**pk.to_dict(), "environment": env.to_dict(), "hard_key": env.hard_key, "m": m,
                    "config": r["config"], "status": "ok", "p20_ms": r["p20_ms"], "p50_ms": r["median_ms"],
                    "p80_ms": r["p80_ms"], "iterations": r["reps"], "host": "ship_configs", "study": study,
                    "trial": None, "uid": str(uuid.uuid4()), "created_at": now})
    return out


def write(out: Path, new: list[dict], families: dict[str, str], append: bool) -> None:
    """The shipped file: header (format, templates per family) + records; ``append`` keeps the file's other
    records except those of the same problems."""
    from cutlass_nm.store.store import FORMAT

    old, templates = [], {}
    if append and out.exists():
        lines = out.read_text().splitlines()
        templates = json.loads(lines[0]).get("templates", {})
        keys = {(r["family"], r["pattern"], r["m_bucket"], r["n"], r["k"], r["dtype"]) for r in new}
        old = [json.loads(x) for x in lines[1:] if x.strip()]
        old = [r for r in old if (r["family"], r["pattern"], r["m_bucket"], r["n"], r["k"], r["dtype"]) not in keys]
    templates.update(families)
    rows = old + new
    header = {"format": FORMAT, "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "source": "tuning/ship_configs.py", "records": len(rows), "templates": templates}
    out.write_text("\n".join(json.dumps(r) for r in [header, *rows]) + "\n")


def carry_over(out: Path, family: str) -> None:
    from cutlass_nm.store.fingerprint import template_hash

    lines = out.read_text().splitlines()
    header = json.loads(lines[0])
    header.setdefault("templates", {})[family] = template_hash(family)
    out.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    print(f"{out}: {family}'s records now stand for templates {template_hash(family)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="sptc24_sm90", choices=sorted(GRID))
    ap.add_argument("--pattern", default="2:4")
    ap.add_argument("--dtype", default="f16", choices=("f16", "bf16", "e4m3"), help="inputs (e4m3: FP8, bf16 out)")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="token counts, comma-separated")
    ap.add_argument("--reps", type=int, default=20, help="timed graph replays per candidate (median kept)")
    ap.add_argument("--out", type=Path, help="the shipped JSONL to write")
    ap.add_argument("--shape", action="append", help="M,N,K: measure these problems instead of the tune models', "
                    "with the default path's choice beside the grid (its time over the best is printed per problem; "
                    "never with --out)")
    ap.add_argument("--all-tiles", action="store_true", help="every grid config at every m (no token-tile rule)")
    ap.add_argument("--vary", action="append", metavar="FIELD=V1,V2",
                    help="time each grid config once per value of FIELD (e.g. fast_accum=0,1); repeatable")
    ap.add_argument("--fused-gate-up", action="store_true",
                    help="the tune models' fused gate/up weights (2 x gate's rows; e.g. --pattern 256:2:8) instead "
                         "of their layers")
    ap.add_argument("--append", action="store_true", help="keep the file's records of other problems")
    ap.add_argument("--measurements", type=Path, help="also write every timed candidate here (JSON rows)")
    ap.add_argument("--carry-over", metavar="FAMILY", help="only mark FAMILY's records valid for this version")
    ap.add_argument("--dry-run", action="store_true", help="list problems and candidates; no GPU needed")
    args = ap.parse_args(argv)
    if args.carry_over:
        carry_over(args.out, args.carry_over)
        return 0
    from cutlass_nm.families import get_family
    from cutlass_nm.kernels import precompile
    from cutlass_nm.store.fingerprint import template_hash

    family = get_family(args.family)
    if args.shape:
        if args.out:
            ap.error("--shape measures problems outside the tune models: they never go into a shipped file")
        from cutlass_nm.families import Problem

        probs = [Problem(*(int(v) for v in t.split(",")), kernel_types(args.dtype), args.pattern) for t in args.shape]
    else:
        if not args.out:
            ap.error("--out is required (the shipped JSONL to write)")
        probs = problems(family, tuple(int(t) for t in args.tokens.split(",")), args.pattern, args.dtype,
                         args.fused_gate_up)
    grid = {"all_tiles": args.all_tiles, "vary": parse_vary(family, args.vary)}
    kids = {(family.name, c, p.types) for p in probs for c in candidates(family, p.m, **grid)
            if family.check(c, p) is None}
    if args.shape:  # the default path's choice too (its family may be a decode family)
        kids |= {(fam.name, cfg, p.types) for p in probs for fam, cfg, _ in [default_choice(family, p)]}
    kids = sorted(kids, key=str)  # precompile adds the helper kernels their launchers call
    print(f"{len(probs)} problems, {len(kids)} kernels", flush=True)
    if args.dry_run:
        return 0
    t0 = time.time()
    failed = [r for r in precompile(kids) if isinstance(r, Exception)]
    print(f"compiled in {time.time() - t0:.0f} s, {len(failed)} failed", flush=True)
    rows = measure(family, probs, args.reps, lambda s: print(s, flush=True), with_default=bool(args.shape), grid=grid)
    if args.measurements:  # first: the rows survive whatever follows
        from cutlass_nm.bench.env import environment

        args.measurements.write_text(json.dumps({"environment": {**environment(), "command": " ".join(sys.argv)},
                                                 "rows": rows}, indent=1))
    if args.out:
        write(args.out, records(family, rows, f"ship_configs/{args.family}"),
              {family.name: template_hash(family.name)}, args.append)
    if args.shape:
        print("\n".join(default_vs_best(rows)), flush=True)
    print(f"done in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""nm_simt A/B in alternating rounds, same run (issue 6): a template against an earlier one, or new configs
against the winners of an acceptance sweep.

    git show 40e8f40:cutlass_nm/codegen/templates/nm_simt.cu > /tmp/base.cu
    python3 benchmarks/ab_nm_simt.py --base-template /tmp/base.cu \
        --winners benchmarks/results/h100/nm_simt_plain_8_32_1_4_2_8_4_32_1_8_40e8f40.json --tokens 256,512 \
        --out benchmarks/results/h100/ab_nm_simt.json
    python3 benchmarks/ab_nm_simt.py --challengers kwarps --winners ... --out ...
    python3 benchmarks/ab_nm_simt.py --challengers tail --winners ... --out ...
    python3 benchmarks/ab_nm_simt.py --challengers cluster --winners ... --out ...

For each fp32 row of the winners file(s) (shape, pattern and the config that won it), "base" is that config built
from ``--base-template`` (the same config fields substituted) or, with ``--challengers``, from the current template;
"new" is the config built from the current template, or the fastest of the named challenger set (bench_nm_simt.py's
candidates(): split-K and split-sum variants included, each timed once; ``tail``: the winner with split_reduce = 3 and
split 2, 3 or 4, on rows whose tiles leave a last partial wave of CTAs; ``cluster``: a two-way split winner with its
splits summed in a cluster). Then base, new and cuBLAS SGEMM (TF32 off)
are timed in turn, ``--rounds`` times, each a CUDA graph of calls over inputs rotated past L2, after a check of both
against an fp64 reference. Reported per row: the medians, ``new / base`` (the median of the rounds' ratios) and each
side's % of ideal (M/N) against the same rounds' SGEMM.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from string import Template

import torch
from bench_nm_simt import KWARPS, TYPES, VECTOR, _dense_call, _kernel_call, candidates, reference, rel_err

from cutlass_nm.bench.env import environment
from cutlass_nm.bench.timing import copies_to_rotate, time_rotating
from cutlass_nm.build import build_many
from cutlass_nm.families import Problem
from cutlass_nm.families.nm_simt import ELEMENTS, FAMILY, Config, resident_slots
from cutlass_nm.formats.nm import compress_nm
from cutlass_nm.kernels import get_kernel, kernel_name, precompile
from cutlass_nm.patterns import Pattern

CHALLENGERS = {"kwarps": KWARPS, "tail": None, "cluster": None}


def cluster_rivals(r: dict) -> list[Config]:
    """The row's winner with its two splits summed in a thread block cluster (split_reduce = 2), where it splits k
    in two otherwise."""
    cfg = Config.from_record(r["config"])
    if cfg.split_k != 2 or cfg.split_reduce == 2:
        return []
    problem = Problem(r["m"], r["n"], r["k"], TYPES["f32"], r["pattern"], VECTOR)
    cluster = replace(cfg, split_reduce=2)
    return [cluster] if FAMILY.check(cluster, problem) is None else []


def tail_rivals(r: dict, sms: int) -> list[Config]:
    """The row's winner with split_reduce = 3 and split 2-4, where its CTA tiles overfill the GPU by a partial wave
    (resident_slots, as the heuristic counts); none elsewhere."""
    cfg = Config.from_record(r["config"])
    tiles = -(-r["n"] // cfg.block_rows) * -(-r["m"] // cfg.block_tokens)
    slots = resident_slots(cfg, sms)
    if tiles <= slots or tiles % slots == 0:
        return []
    problem = Problem(r["m"], r["n"], r["k"], TYPES["f32"], r["pattern"], VECTOR)
    tails = [replace(cfg, split_k=s, split_reduce=3) for s in (2, 3, 4)]
    return [c for c in tails if FAMILY.check(c, problem) is None]


def base_source(text: str, cfg: Config, dtype: str) -> str:
    """The base template with this config's validated integer fields, as the family's source() fills it."""
    fields = {name: int(getattr(cfg, name)) for name in Config.SPACE}
    return Template(text).substitute(element=ELEMENTS[dtype], **fields)


def winner_rows(paths: list[str], patterns: set[str] | None, tokens: set[int] | None) -> list[dict]:
    rows = []
    for path in paths:
        for r in json.loads(Path(path).read_text())["rows"]:
            if r.get("impl") != "nm_simt_tuned" or r["dtype"] != "f32":
                continue
            if (patterns and r["pattern"] not in patterns) or (tokens and r["m"] not in tokens):
                continue
            rows.append(r)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--base-template", help="the earlier nm_simt.cu (e.g. from git show)")
    which.add_argument("--challengers", choices=sorted(CHALLENGERS), help="configs to try against each winner")
    ap.add_argument("--winners", required=True, help="comma-separated bench_nm_simt.py result files")
    ap.add_argument("--patterns", default="", help="only these patterns (comma-separated; default all)")
    ap.add_argument("--tokens", default="", help="only these token counts (default all)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    types = TYPES["f32"]
    rows = winner_rows(args.winners.split(","), set(filter(None, args.patterns.split(","))),
                       {int(t) for t in args.tokens.split(",") if t})
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    own = {"tail": lambda r: tail_rivals(r, sms), "cluster": cluster_rivals}.get(args.challengers or "")
    if own is not None:  # only the rows the challenger set can change
        rows = [r for r in rows if own(r)]
    cfgs = list(dict.fromkeys(Config.from_record(r["config"]) for r in rows))
    kids = [(FAMILY.name, c, types) for c in cfgs]
    rivals: dict[int, list[Config]] = {}
    built: list = []  # the base template's kernels (--base-template)
    if own is not None:
        rivals = {i: own(r) for i, r in enumerate(rows)}
    elif args.challengers:
        sweep = CHALLENGERS[args.challengers]
        rivals = {i: [c for c in candidates(r["m"], r["n"], r["k"], types, sweep, r["pattern"])  # not the heuristic
                      if c.split_k <= 2 and replace(c, split_k=1, split_reduce=0) in sweep] for i, r in enumerate(rows)}
    if args.challengers:
        kids += [(FAMILY.name, c, types) for c in dict.fromkeys(c for cs in rivals.values() for c in cs)]
    else:
        text = Path(args.base_template).read_text()
        jobs = [(base_source(text, c, "f32"), FAMILY.arch, kernel_name(kid) + "_base")
                for c, kid in zip(cfgs, kids, strict=True)]
        built = build_many(jobs)
    failed = [b for b in [*built, *precompile(kids)] if isinstance(b, Exception)]
    if failed:
        raise SystemExit(f"build failed: {failed[0]}")
    base = {c: FAMILY.bind(ctypes.CDLL(str(a.path)), c, types) for c, a in zip(cfgs, built, strict=False)}

    out = []
    env, command = environment(), " ".join(["benchmarks/ab_nm_simt.py", *sys.argv[1:]])
    g = torch.Generator(device="cuda").manual_seed(0)
    for i, r in enumerate(rows):
        m, n, k, pat = r["m"], r["n"], r["k"], Pattern.parse(r["pattern"])
        cfg = Config.from_record(r["config"])
        wd = [torch.randn(n, k, device="cuda", generator=g) for _ in range(copies_to_rotate(n * k * 4))]
        ws = [compress_nm(w, pat, VECTOR, prune=True) for w in wd]
        copies = copies_to_rotate(m * k * 4 + n * k * 4)
        xs = [torch.randn(m, k, device="cuda", generator=g) for _ in range(copies)]
        ys = [torch.empty(m, n, device="cuda") for _ in range(copies)]
        ref = reference(xs[0], ws[0])
        new_cfg, tried = cfg, []
        if args.challengers:  # the fastest challenger against the winner, both from the current template
            base_k = get_kernel((FAMILY.name, cfg, types))
            for c in rivals[i]:
                kern = get_kernel((FAMILY.name, c, types))
                if not rel_err(kern, xs[0], ws[0], ys[0], ref) < 1e-5:
                    raise SystemExit(f"wrong result {m}x{n}x{k} {r['pattern']} {c}")
                t = time_rotating(_kernel_call(kern, xs, ws, ys), copies, reps=args.reps, warmup_ms=20)
                tried.append((t.p50_ms, c))
            if not tried:
                continue
            new_cfg = min(tried, key=lambda t: t[0])[1]
        else:
            base_k = base[cfg]
        new_k = get_kernel((FAMILY.name, new_cfg, types))
        errs = {"new": rel_err(new_k, xs[0], ws[0], ys[0], ref), "base": rel_err(base_k, xs[0], ws[0], ys[0], ref)}
        if not all(e < 1e-5 for e in errs.values()):
            raise SystemExit(f"wrong result {m}x{n}x{k} {r['pattern']} {cfg}: {errs}")
        calls = {"dense": _dense_call(xs, wd, ys), "new": _kernel_call(new_k, xs, ws, ys),
                 "base": _kernel_call(base_k, xs, ws, ys)}
        rounds = [{name: time_rotating(fn, copies, reps=args.reps, warmup_ms=20).p50_ms for name, fn in calls.items()}
                  for _ in range(args.rounds)]
        ideal = pat.m / pat.n
        row = {"m": m, "n": n, "k": k, "pattern": r["pattern"], "config": cfg.to_record(),
               "new_config": new_cfg.to_record(), "challengers": [{"config": c.to_record(), "ms": t} for t, c in tried],
               "rel_err": errs,
               **{f"{name}_ms": statistics.median(x[name] for x in rounds) for name in calls},
               "new_over_base": statistics.median(x["new"] / x["base"] for x in rounds),
               "pct_of_ideal_new": 100 * statistics.median(x["dense"] / x["new"] for x in rounds) / ideal,
               "pct_of_ideal_base": 100 * statistics.median(x["dense"] / x["base"] for x in rounds) / ideal,
               "rounds": rounds}
        out.append(row)
        print(json.dumps({key: v for key, v in row.items() if key not in ("rounds", "challengers")}), flush=True)
        del xs, ys, ws, wd
        result = {"environment": env, "command": command, "rows": out}
        Path(args.out).write_text(json.dumps(result, indent=1))  # after each row: a run cut short keeps its rows
    ratios = [r["new_over_base"] for r in out]
    if ratios:
        print(f"geomean new / base over {len(ratios)} rows: "
              f"{statistics.geometric_mean(ratios):.4f} (min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()

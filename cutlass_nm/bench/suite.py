"""``cutlass-nm bench``: every registered family against cuBLAS and cuSPARSELt on the seeds' shapes, in one run.

    cutlass-nm bench --quick                        # a few shapes per family; <= 3 min on an H100, compiles included
    cutlass-nm bench --preset nmsparse --preset llama --preset venom --sparsity 50,75,87.5,90
    cutlass-nm bench --preset headline --dry-run    # list what would be timed (no GPU needed)
    cutlass-nm bench --report suite.json           # markdown + PNGs again from a result JSON

Per shape, in one process: cuBLAS dense in the run's dtype, cuBLAS SGEMM with TF32 off (the CUDA-core
baseline), cuSPARSELt 2:4 after ``mm_search`` (in child processes: some of its paths fault), and every family
registered in ``cutlass_nm.families.FAMILIES`` at each pattern of its weight kind (shapes.PATTERNS), with the
config dispatch would choose and its ``config_source``: the user's tuning DB (``user``), the configs shipped in the
package (``shipped``), the config model's prediction from the nearest tuned problems (``model``), or the family's
heuristic (``heuristic``; ``--heuristic`` forces it). ``--split held_out`` times the models that never fed the
shipped configs. Families that cannot run a shape (e.g. nm_decode above m = 16) are listed under
``skipped``. Rows hold the time (median/p20/p80), dense-equivalent ``tflops``, ``rel_err``,
``speedup_vs_*``, family, pattern, sparsity, ``tflops_effective`` (nonzero flops), ``gbps``, and
``pct_of_ideal`` against ``bench.roofline.ideal_ms``. The baselines multiply the
2:4-pruned weight as a dense matrix (as cuSPARSELt's own run does).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from ..errors import DeviceError, InputError
from . import shapes as shp
from .cases import BASELINES, Case


def gpu_slug(name: str | None) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100'; 'NVIDIA GeForce RTX 4090' -> 'rtx-4090'; no GPU -> 'cpu'."""
    if not name:
        return "cpu"
    toks = [t for t in re.findall(r"[a-z0-9]+", name.lower()) if t not in ("nvidia", "geforce", "tesla", "quadro")]
    for t in toks:
        if re.fullmatch(r"[a-z]+\d+[a-z]*", t):
            return t
    return "-".join(toks[:2]) or "gpu"


def plan(shapes: list[shp.Shape], families: list[str], types: Any, patterns: dict[str, list[str]],
         selector: Any = None) -> tuple[list[Case], list[dict]]:
    """Cases to time and (shape, family) pairs skipped with the reason. One config per (shape, family, pattern),
    as dispatch chooses it: ``selector``'s (a ``store.chooser.DefaultChooser``: user DB, shipped, model) if it
    runs the problem, else the heuristic."""
    from ..dispatch import _config_of
    from ..families import Problem, get_family
    from ..routing import weight_kind
    from .run import NM_VECTOR

    cases: list[Case] = []
    skipped: list[dict] = []
    for s in shapes:
        for name in families:
            fam = get_family(name)
            kind = weight_kind(fam.weight)
            pats = patterns.get(kind or "", [])
            reason = None if kind else f"weight type {fam.weight!r} has no pattern set here"
            if reason is None and not pats:
                reason = "no pattern of its kind selected"
            chosen = []
            for pat in pats if reason is None else []:
                p = Problem(s.m, s.n, s.k, types, pat, vector=NM_VECTOR if kind == "nm" else 0)  # make_weight's
                try:
                    cfg, source = _config_of(selector(fam, p)) if selector else (None, "heuristic")
                    if cfg is None or fam.check(cfg, p) is not None:
                        cfg, source = fam.heuristic(p), "heuristic"
                    reason = fam.check(cfg, p)
                except Exception as exc:  # a family's own refusal is a skip, not the end of the run
                    reason = f"{type(exc).__name__}: {exc}"
                if reason is not None:
                    break
                chosen.append(Case(s, name, kind, pat, cfg, source))
            if reason is not None:
                skipped.append({"m": s.m, "n": s.n, "k": s.k, "family": name, "reason": str(reason)[:200]})
                continue
            cases += chosen
    return cases, skipped


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``bench`` subcommand's options (also used by ``python -m cutlass_nm.bench.suite``)."""
    p.add_argument("--quick", action="store_true", help="the quick preset, fewer reps (<= 3 min on an H100)")
    p.add_argument("--preset", action="append", choices=sorted(shp.PRESETS),
                   help="shape set (repeatable): quick, headline, nmsparse (M1-M32), llama (NM-SpMM), venom")
    p.add_argument("--shape", action="append", type=_shape, help="extra M,N,K (tokens, out, in); repeatable")
    p.add_argument("--model", action="append", help="the layer shapes of a shipped model campaign (repeatable; "
                   "`cutlass-nm build --help` lists them), at each --tokens count")
    p.add_argument("--split", choices=("tune", "held_out"), help="every model of a campaign split: 'held_out' "
                   "models were never tuned (they measure the default path on shapes nobody tuned)")
    p.add_argument("--tokens", default="16,128,512,2048,8192",
                   help="token counts (m) for --model/--split, comma-separated (default 16,128,512,2048,8192)")
    p.add_argument("--family", action="append", help="only these registered families (repeatable; default: all)")
    p.add_argument("--sparsity", default="50,75,87.5,90", help="levels in %% (default 50,75,87.5,90)")
    p.add_argument("--patterns", help="explicit patterns instead of the levels' defaults, e.g. 2:4,1:4,128:2:8")
    p.add_argument("--all-patterns", action="store_true", help="also the seeds' other patterns at each level")
    p.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    p.add_argument("--reps", type=int, help="timed replays per row (default 50; 30 with --quick)")
    p.add_argument("--no-cusparselt", action="store_true", help="skip the cuSPARSELt baseline")
    p.add_argument("--no-sgemm", action="store_true", help="skip the cuBLAS SGEMM baseline")
    p.add_argument("--heuristic", action="store_true", help="ignore the tuning DB: heuristic configs only")
    p.add_argument("--db", help="tuning DB URL (default: $CUTLASS_NM_DB or the user cache's SQLite)")
    p.add_argument("--records", action="append", type=Path,
                   help="tuning records (JSONL export, e.g. a `cutlass-nm db export` file) to use instead")
    p.add_argument("--budget-s", type=float, help="stop starting new shapes after this many seconds")
    p.add_argument("--jobs", type=int, help="parallel nvcc processes (default: all cores)")
    p.add_argument("--out", type=Path, default=Path("."), help="output folder (default: the current directory)")
    p.add_argument("--name", help="file stem (default: suite, or suite_quick with --quick)")
    p.add_argument("--dry-run", action="store_true", help="list what would be timed and compiled; no GPU needed")
    p.add_argument("--report", type=Path, metavar="JSON", help="only write the markdown and PNGs of a result JSON")


def _shape(text: str) -> shp.Shape:
    try:
        return shp.Shape(*shp.parse_mnk(text), "cli")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def selected(args: argparse.Namespace) -> tuple[list[shp.Shape], list[str], dict[str, list[str]]]:
    """Shapes, family names and patterns per weight kind that the arguments select."""
    from ..families import FAMILIES
    from ..patterns import Pattern

    campaign = _campaign_shapes(args)
    presets = args.preset or (["quick"] if args.quick or not (args.shape or campaign) else [])
    shapes = shp.merge([s for name in presets for s in shp.preset(name)] + list(args.shape or []) + campaign)
    unknown = set(args.family or []) - set(FAMILIES)
    if unknown:
        raise InputError(f"unknown families {sorted(unknown)}; registered: {sorted(FAMILIES)}")
    families = [f for f in FAMILIES if not args.family or f in args.family]
    if args.patterns:
        pats = [str(Pattern.parse(t)) for t in args.patterns.split(",")]
        patterns = {"24": [p for p in pats if p == "2:4"], "vnm": [p for p in pats if p.count(":") == 2],
                    "nm": [p for p in pats if p.count(":") == 1]}
    else:
        levels = tuple(shp.parse_level(t) for t in args.sparsity.split(","))
        patterns = {kind: shp.patterns_for(kind, levels, args.all_patterns) for kind in shp.PATTERNS}
    return shapes, families, patterns


def _campaign_shapes(args: argparse.Namespace) -> list[shp.Shape]:
    """The shapes of ``--model`` and ``--split`` campaigns at each ``--tokens`` count, named model.layer."""
    from ..campaigns import load_models, split_models

    names = list(getattr(args, "model", None) or []) + (split_models(args.split) if getattr(args, "split", None)
                                                        else [])
    if not names:
        return []
    models = load_models()
    if unknown := [n for n in names if n not in models]:
        raise InputError(f"unknown models {unknown}; known: {', '.join(sorted(models))}")
    try:
        tokens = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        raise InputError(f"--tokens takes comma-separated integers, got {args.tokens!r}") from None
    named: dict[tuple[int, int, int], str] = {}
    for name in names:
        for layer, n, k in models[name]:
            for m in tokens:
                named.setdefault((m, n, k), f"{name}.{layer}")
    return [shp.Shape(m, n, k, label) for (m, n, k), label in sorted(named.items())]


def _selector(args: argparse.Namespace, scratch: Path, gpu: bool = True) -> Any:
    """Dispatch's config chooser (user DB, then shipped configs, then the config model), or None with
    ``--heuristic``. ``--records`` files are loaded (and so checked) even without a GPU, but the lookup needs one:
    records are matched by the GPU's fingerprint."""
    if args.heuristic:
        return None
    from ..store.chooser import default_chooser

    url = args.db
    if args.records:
        from ..store.store import Store

        scratch.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{scratch / 'records.sqlite'}"
        store = Store(url)
        for path in args.records:
            print(f"tuning records {path}: {store.merge(path.read_text().splitlines(), source=str(path))}", flush=True)
    if not gpu:
        print("no CUDA GPU here: heuristic configs (tuned configs are looked up by the GPU's fingerprint)")
        return None
    return default_chooser(url, db=True if args.records else None)


def _gpu_visible() -> bool:
    import torch

    return torch.cuda.is_available()


def dry_run(cases: list[Case], skipped: list[dict], shapes: list[shp.Shape], types: Any, args) -> None:
    """Print what a run would time and compile."""
    baselines = [b for b in BASELINES if not (b == "cublas_sgemm" and args.no_sgemm)
                 and not (b.startswith("cusparselt") and args.no_cusparselt)]
    for s in shapes:
        print(f"{s.m} x {s.n} x {s.k}  ({s.name or '-'})  baselines: {', '.join(baselines)}")
        for c in (c for c in cases if c.shape == s):
            cfg = ",".join(str(v) for v in c.config.to_record().values())
            print(f"    {c.impl:<24} {c.pattern:<9} [{cfg}]")
        for sk in (sk for sk in skipped if (sk["m"], sk["n"], sk["k"]) == s.mnk):
            print(f"    skip {sk['family']}: {sk['reason']}")
    kids = {(c.family, c.config, types) for c in cases}
    print(f"{len(shapes)} shapes, {len(cases)} family rows + {len(baselines)} baselines per shape, "
          f"{len(kids)} kernels to compile, {len(skipped)} (shape, family) pairs skipped")


def main(args: argparse.Namespace) -> int:
    """Entry point of ``cutlass-nm bench``."""
    if args.report:
        result = json.loads(args.report.read_text())
        for path in write_reports(result, args.report.with_suffix("")):
            print("wrote", path)
        return 0
    from ..families import KernelTypes

    types = KernelTypes(args.dtype, args.dtype, False)
    shapes, families, patterns = selected(args)
    gpu = _gpu_visible()
    if not gpu and not args.dry_run:  # before the tuning DB: its records are looked up by this GPU's fingerprint
        raise DeviceError("bench needs a CUDA GPU; none is visible (torch.cuda.is_available() is False); "
                          "--dry-run lists what would be timed")
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"cutlass_nm_bench_{os.getpid()}"
    selector = _selector(args, scratch, gpu)
    cases, skipped = plan(shapes, families, types, patterns, selector)
    if args.dry_run:
        dry_run(cases, skipped, shapes, types, args)
        return 0
    from .run import run_suite

    def stem_of(result: dict) -> Path:
        out = args.out
        out.mkdir(parents=True, exist_ok=True)
        return out / (args.name or ("suite_quick" if args.quick else "suite"))

    def save(result: dict) -> Path:  # also after each worker group, so a killed run leaves its rows
        path = stem_of(result).with_suffix(".json")
        path.write_text(json.dumps(result, indent=1))
        return path

    result = run_suite(shapes, cases, skipped, types, args, checkpoint=save)
    print("wrote", save(result))
    stem = stem_of(result)
    for path in write_reports(result, stem):
        print("wrote", path)
    return 0


def write_reports(result: dict, stem: Path) -> list[Path]:
    """``<stem>.md`` always; ``<stem>_speedup.png`` and ``<stem>_roofline.png`` where matplotlib is installed."""
    from .report import markdown

    md = stem.with_name(stem.name + ".md")
    md.write_text(markdown(result) + "\n")
    paths = [md]
    try:
        from .plots import plot_all
    except ImportError as exc:  # matplotlib is the `bench` extra
        print(f"no plots ({exc}); pip install cutlass-nm[bench]")
        return paths
    return paths + plot_all(result, stem)


def geomean(vals: list[float]) -> float | None:
    vals = [v for v in vals if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def cli() -> int:
    ap = argparse.ArgumentParser(prog="cutlass-nm bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    return main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(cli())

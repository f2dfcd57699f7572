"""``cutlass-nm``: command-line entry point.

    cutlass-nm check                 compile the 2:4 kernels for this machine and verify them on its GPU
    cutlass-nm build --shape M,N,K   precompile the kernels matmul will pick for these shapes
    cutlass-nm build --model llama-7b --tokens 2048   ... or for a model's layers (the shipped campaigns)
    cutlass-nm cache                 where compiled kernels live, and how many (path, ls, clear, prune)
    cutlass-nm db ...                the tuning database: path, ls, show, export, import, merge, upgrade, gc
    cutlass-nm tune --model llama-7b --pattern 2:4   tune a model's layer shapes on this GPU (Optuna)
    cutlass-nm bench --quick         every family against cuBLAS and cuSPARSELt on the seeds' shape sets
    cutlass-nm --version

User errors (an unknown model, a bad pattern, a missing file, no GPU for tune/bench, ...) print one line,
``cutlass-nm: error: ...``, and exit with 2; ``--debug`` shows their traceback instead.
"""

from __future__ import annotations

import argparse
import io
import itertools
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from rich.console import Console
from rich.table import Table

from .errors import CutlassNMError, DeviceError

console = Console()
PROG = "cutlass-nm"
USER_OS_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


class UsageError(CutlassNMError):
    """The command line itself is wrong (argparse's complaint, or options that do not go together)."""


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are exceptions, so that ``main`` reports them in one line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _need_gpu(command: str) -> None:
    import torch

    if not torch.cuda.is_available():
        raise DeviceError(f"{command} needs a CUDA GPU; none is visible (torch.cuda.is_available() is False)")


def _shape(text: str) -> tuple[int, int, int]:
    from .bench.shapes import parse_mnk

    try:
        return parse_mnk(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    """A positive integer argument (a count of tokens, trials, jobs)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _kernel_ids(shapes, families, dtype: str, bias: bool, all_types: bool = False):
    """The (family, heuristic config, types) ids for the shapes, and {(family, shape): why} for those the family
    cannot run; ``all_types``: every input dtype, output (input dtype or f32) and bias choice, i.e. whatever a
    model may ask for."""
    from .families import KernelTypes, Problem, get_family

    if all_types:
        variants = [KernelTypes(d, o, b) for d in ("f16", "bf16") for o in (d, "f32") for b in (False, True)]
    else:
        variants = [KernelTypes(dtype, dtype, bias)]
    kids, skipped = set(), {}
    for s, f, t in itertools.product(shapes, families, variants):
        fam, problem = get_family(f), Problem(*s, t)
        cfg = fam.heuristic(problem)
        if (why := fam.check(cfg, problem)) is None:
            kids.add((f, cfg, t))
        else:
            skipped[(f, s)] = why
    return sorted(kids, key=str), skipped


def cmd_build(args: argparse.Namespace) -> int:
    from .build.progress import build_progress
    from .campaigns import model_shapes
    from .kernels import precompile

    for model in args.model or []:
        args.shape = (args.shape or []) + model_shapes(model, args.tokens, args.campaigns)
    if not args.shape:
        raise UsageError("give --shape M,N,K or --model NAME")

    kids, skipped = _kernel_ids(args.shape, args.family, args.dtype, args.bias, getattr(args, "all_types", False))
    for (family, (m, n, k)), why in sorted(skipped.items()):
        console.print(f"skip {family} at {m}x{n}x{k}: {why}", highlight=False)
    if not kids:
        raise UsageError("no kernel to build: every family given refuses every shape (see above)")
    t0 = time.time()
    console.print(f"compiling {len(kids)} kernel(s) on {args.jobs or 'all'} cores "
                  "(a new sm90 kernel takes 1-2 min on one core)", highlight=False)
    with build_progress(len(kids), console) as progress:
        results = precompile(kids, workers=args.jobs, progress=progress)
    table = Table("family", "config", "result")
    for kid, res in zip(kids, results, strict=True):
        verdict = f"[red]{res}" if isinstance(res, Exception) else ("built" if res.built else "cached")
        table.add_row(kid[0], str(kid[1].to_record()), verdict)
    console.print(table)
    console.print(f"{time.time() - t0:.0f} s")
    return 0 if all(not isinstance(r, Exception) for r in results) else 1


def cmd_check(args: argparse.Namespace) -> int:
    import torch

    from .routing import default_family

    shapes = [(1, 4096, 4096), (300, 1056, 2112), (2048, 4096, 4096)]
    gpu = torch.cuda.is_available()
    console.print(f"GPU: {torch.cuda.get_device_name() if gpu else 'none (compile check only)'}")
    if not gpu:
        args.shape, args.family, args.dtype, args.bias, args.model = shapes, ["sptc24_sm90", "sptc24_sm80"], "f16", \
            False, None
        if cmd_build(args):
            return 1
        console.print("[yellow]no CUDA GPU here: kernels compiled, nothing launched")
        return 0
    console.print(f"default 2:4 family for m > 1: {default_family(torch.device('cuda'))}")
    return _check_on_gpu(shapes, args.jobs)


def _check_on_gpu(shapes: list[tuple[int, int, int]], jobs: int | None) -> int:
    """Compile what ``matmul`` picks for each shape, run it against fp64, time it eager and as a CUDA graph (each
    side against ``torch.mm`` on the masked dense weight, inputs rotated past L2)."""
    import torch

    import cutlass_nm

    from . import fastcall
    from .build.progress import build_progress
    from .dispatch import kernels_for
    from .kernels import precompile
    from .timing import copies_to_rotate, time_rotating

    cases = []
    for m, n, k in shapes:
        copies = copies_to_rotate((m * k + n * k) * 2)
        xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(copies)]
        ws = [cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.float16))[0] for _ in range(copies)]
        cases.append((xs, ws, [w.to_dense() for w in ws]))
    kids = kernels_for([(xs[0].shape[0], ws[0], xs[0].dtype, False) for xs, ws, _ in cases])
    with build_progress(len(kids), console) as progress:  # the C++ launch extension is built beside the kernels
        results = fastcall.beside(lambda: precompile(kids, workers=jobs, progress=progress))
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        console.print(f"[red]{len(failed)} kernel(s) failed to compile: {failed[0]}")
        return 1
    table = Table("m x n x k", "family", "config", "rel. error vs fp64", "speedup vs torch.mm: eager",
                  "CUDA graph")
    bad = False
    for xs, ws, wds in cases:
        (m, k), n, copies = xs[0].shape, ws[0].out_features, len(xs)
        y = cutlass_nm.matmul(xs[0], ws[0])
        ref = xs[0].double() @ wds[0].double().T
        err = ((y.double() - ref).norm() / ref.norm()).item()
        bad |= not err < 2e-3

        def dense(i: int, xs=xs, wds=wds) -> torch.Tensor:
            return torch.mm(xs[i], wds[i].T)

        def sparse(i: int, xs=xs, ws=ws) -> torch.Tensor:
            return cutlass_nm.matmul(xs[i], ws[i])

        eager = _time(dense, copies) / _time(sparse, copies)
        graph = time_rotating(dense, copies).p50_ms / time_rotating(sparse, copies).p50_ms
        chosen = {(r["m"], r["n"], r["k"]): r for r in cutlass_nm.dispatch.resolved()}.get((m, n, k), {})
        table.add_row(f"{m} x {n} x {k}", chosen.get("family", "?"), chosen.get("config_source", "?"), f"{err:.1e}",
                      f"{eager:.2f}x", f"{graph:.2f}x")
    console.print(table)
    console.print("Eager calls (plain PyTorch, HF generate) get the eager column: each call also pays its host time, "
                  "which small problems feel; CUDA graphs (torch.compile mode='reduce-overhead') get the graph column.",
                  highlight=False)
    console.print(fastcall.status(), highlight=False)
    return 1 if bad else 0


def _time(fn, copies: int, reps: int = 50) -> float:
    """Wall time per call of ``reps`` back-to-back eager calls ``fn(i % copies)`` (CUDA events), after a warm-up
    call of each input set."""
    import torch

    for i in range(copies):
        fn(i)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for i in range(reps):
        fn(i % copies)
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / reps


def cmd_cache(args: argparse.Namespace) -> int:
    from .build import cache
    from .build.compiler import cache_dir

    d = cache_dir()
    what = args.cache_command
    if what == "path":
        print(d)
    elif what == "ls":
        _cache_ls(cache.entries(d))
    elif what == "clear":
        n = len(cache.entries(d))
        if not args.yes and not _confirm(f"delete all {n} compiled kernel(s) in {d}?"):
            raise UsageError("cache clear deletes every compiled kernel: confirm with --yes")
        n, size = cache.clear(d)
        print(f"deleted {n} kernel(s), {size / 1e6:.1f} MB")
    elif what == "prune":
        gone = cache.prune(args.days, d, dry_run=args.dry_run)
        verb = "would delete" if args.dry_run else "deleted"
        print(f"{verb} {len(gone)} kernel(s) unused for {args.days:g} days, {sum(e.size for e in gone) / 1e6:.1f} MB")
    else:
        libs = cache.entries(d)
        console.print(f"{d}: {len(libs)} kernel(s), {sum(e.size for e in libs) / 1e6:.1f} MB "
                      "(set CUTLASS_NM_CACHE to move it)", highlight=False, soft_wrap=True)
    return 0


def _cache_ls(entries: list) -> None:
    """Kernels oldest first: a table in a terminal, tab-separated full lines when piped."""
    rows = [(e.name, f"{e.size / 1e6:.1f} MB", time.strftime("%Y-%m-%d %H:%M", time.localtime(e.mtime)), e.key)
            for e in entries]
    if not console.is_terminal:
        for row in rows:
            print("\t".join(row))
        return
    table = Table("kernel", "size", "built", "key", title=f"{len(rows)} kernel(s)")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _compact(config: Any) -> str:
    """A config's fields by name in its space's order, e.g. 'tile_m=256 tile_n=128 ... schedule=cooperative'."""
    if not isinstance(config, dict):
        return f"(not a config: {str(config)[:40]})"
    return " ".join(f"{k}={v}" for k, v in config.items())


def _cell(value: Any) -> str:
    """A value read from a record, safe to print: non-printable characters escaped (never read as markup)."""
    text = str(value)
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _ms(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, int | float) else "—" if value is None else _cell(value)


def _db_table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A table in a terminal (cells folded, never cut), tab-separated full lines after a header line when piped."""
    if not console.is_terminal:
        for row in (header, *rows):
            print("\t".join(row))
        return
    from rich.text import Text

    table = Table(*header, title=Text(title))
    for column in table.columns:
        column.overflow = "fold"
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    console.print(table)


def _db_filters(args: argparse.Namespace) -> dict:
    """Problem-column filters of ``db ls``/``db show``: family, pattern (canonical form), shape (m by its bucket)."""
    from .patterns import Pattern
    from .store.fingerprint import m_bucket

    filters = {"family": args.family, "n": args.n, "k": args.k}
    if args.pattern:
        filters["pattern"] = str(Pattern.parse(args.pattern))
    if args.shape:
        m, filters["n"], filters["k"] = args.shape
        filters["m_bucket"] = m_bucket(m)
    return {k: v for k, v in filters.items() if v is not None}


def _db_lines(source: str) -> list[str]:
    """The lines of a records file, or of another database's export (opened read-only)."""
    from .errors import StoreError
    from .store.db import db_timeout
    from .store.store import Store

    if "://" in source:
        buf = io.StringIO()
        Store(source, read_only=True, timeout=db_timeout()).export(buf)
        return buf.getvalue().splitlines()
    try:
        with open(source, encoding="utf-8") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        raise StoreError(f"{source}: no such file; pass a file written by `cutlass-nm db export`") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{source}: cannot read it as a records file ({getattr(exc, 'strerror', None) or exc}); "
                         "pass a file written by `cutlass-nm db export`") from None


def _this_gpu_keys() -> set[str]:
    from .errors import StoreError
    from .families import FAMILIES
    from .store.fingerprint import current_environment

    try:
        return {current_environment(name).hard_key for name in FAMILIES}
    except Exception as exc:
        raise StoreError(f"--this-gpu needs this machine's CUDA GPU and toolchain ({exc.__class__.__name__}: "
                         f"{str(exc)[:80]}); run it on the GPU host or drop --this-gpu") from None


def cmd_db(args: argparse.Namespace) -> int:
    """The tuning database. Read-only commands (path, ls, show, export) never create, migrate or change it;
    every wait is bounded ($CUTLASS_NM_DB_TIMEOUT); errors are one line (StoreError)."""
    from .store.db import MissingDatabase, db_timeout, default_url, parse_url, redact, translated
    from .store.store import ImportRejected, Store, check_records

    url = args.url or default_url()
    parse_url(url)
    if args.db_command == "path":
        print(redact(url))
        return 0
    timeout = db_timeout()
    sources: list[tuple[str, list[str]]] = []
    if args.db_command in ("import", "merge"):  # every source is validated before the database is opened
        only = _this_gpu_keys() if args.this_gpu else None
        with translated(url):
            sources = [(redact(s) if "://" in s else s, _db_lines(s)) for s in args.sources]
        try:
            for name, lines in sources:
                check_records(lines, only, name)
        except ImportRejected as exc:
            if args.rejects:
                with open(args.rejects, "w", encoding="utf-8") as f:
                    f.writelines(f"{exc.source}:{line}: {reason}\n" for line, reason in exc.rejects)
            raise
    if args.db_command == "ls" and args.shipped:
        _db_table("configs shipped in the package", LS_COLUMNS, _shipped_rows(_db_filters(args)))
        return 0
    with translated(url):
        if args.db_command in ("ls", "show", "export"):
            try:
                store = Store(url, read_only=True, timeout=timeout)
            except MissingDatabase as exc:
                print(f"cutlass-nm: {exc}", file=sys.stderr)
                return 0
        else:
            store = Store(url, timeout=timeout)  # creates or migrates the schema
        if args.db_command == "upgrade":
            print(f"{store.url}: schema at head")
        elif args.db_command == "ls":
            studies = store.studies()
            rows = [(_cell(env.gpu), _cell(w.family), _cell(w.pattern), str(w.m_bucket), str(w.n), str(w.k),
                     _cell(f"{w.dtype}->{w.out_dtype}"), str(w.bias), _ms(w.p50_ms),
                     config_source(studies.get(w.measurement_uid)), _cell(_compact(w.config)))
                    for env, w in store.winners(**_db_filters(args))]
            _db_table(f"winners in {store.url}", LS_COLUMNS, rows)
        elif args.db_command == "show":
            rows = [(_cell(m.family), _cell(m.pattern), str(m.m), str(m.n), str(m.k), _cell(m.status), _ms(m.p50_ms),
                     _cell(m.host), _cell(f"{m.study}/{m.trial}"), _cell(_compact(m.config)))
                    for _, m in store.measurements(**_db_filters(args))[-args.limit:]]
            _db_table(store.url, ("family", "pattern", "m", "n", "k", "status", "p50 ms", "host", "study/trial",
                                  "config"), rows)
        elif args.db_command == "export":
            out = open(args.out, "w") if args.out else sys.stdout  # noqa: SIM115 - stdout is not ours to close
            try:
                n = store.export(out)
            finally:
                if args.out:
                    out.close()
            print(f"exported {n} records", file=sys.stderr)
        elif args.db_command in ("import", "merge"):
            for name, lines in sources:  # one transaction per source; all were validated above
                stats = store.merge(lines, only_hard_keys=only, source=name)
                print(f"{_cell(name)}: {stats['new']} new, {stats['known']} known, "
                      f"{stats['skipped_env']} of other GPUs skipped")
        elif args.db_command == "gc":
            n = store.gc(dry_run=args.dry_run)
            print(f"{'would delete' if args.dry_run else 'deleted'} {n} measurements of stale environments")
    return 0


LS_COLUMNS = ("gpu", "family", "pattern", "m≤", "n", "k", "types", "bias", "p50 ms", "source", "config")


def config_source(study: str | None) -> str:
    """A database record's config source: ``shipped`` (imported from a file tuning/ship_configs.py wrote) or
    ``user`` (tuned here, or imported from another user's export)."""
    return "shipped" if (study or "").startswith("ship_configs/") else "user"


def _shipped_rows(filters: dict) -> list[tuple]:
    """``db ls --shipped``: the best shipped config per problem, every GPU, in ``LS_COLUMNS`` order."""
    from .store.shipped import shipped_records

    best: dict[tuple, dict] = {}
    for records in shipped_records().values():
        for r in records:
            if any(r.get(col) != v for col, v in filters.items()):
                continue
            key = (r["environment"].gpu, r["key"])
            if key not in best or r["p50_ms"] < best[key]["p50_ms"]:
                best[key] = r
    return [(_cell(gpu), _cell(k.family), _cell(k.pattern), str(k.m_bucket), str(k.n), str(k.k),
             _cell(f"{k.dtype}->{k.out_dtype}"), str(k.bias), _ms(r["p50_ms"]), "shipped", _cell(_compact(
                 r["config"].to_record())))
            for (gpu, k), r in sorted(best.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))]


def _fixed(items: list[str] | None) -> dict:
    out = {}
    for item in items or []:
        name, _, value = item.partition("=")
        out[name] = int(value) if value.lstrip("-").isdigit() else value
    return out


def cmd_tune(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from .campaigns import model_shapes
    from .families import KernelTypes, Problem
    from .patterns import Pattern
    from .tune import tune_problem

    pattern = Pattern.parse(args.pattern)
    shapes = list(args.shape or [])
    for model in args.model or []:
        shapes += model_shapes(model, args.tokens, args.campaigns)
    if not shapes:
        raise UsageError("give --shape M,N,K or --model NAME")
    _need_gpu("tune")  # after the arguments' own checks, before any DB or CUDA work
    table = Table("m x n x k", "trials", "measured", "pruned", "failed", "best ms", "best config", "seconds")
    gpus = _resolve_gpus(args.gpus)
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("tuning", total=len(shapes) * args.trials * max(1, len(gpus)))
        for m, n, k in sorted(set(shapes)):
            problem = Problem(m, n, k, KernelTypes(args.dtype, args.dtype, args.bias), str(pattern))
            family = args.family or tuned_family(pattern, m, k)
            if gpus:
                table.add_row(*_tune_on_gpus(problem, family, gpus, args, bar, task))
                continue
            res = tune_problem(problem, family=family, n_trials=args.trials, timeout_s=args.timeout,
                               storage=args.storage, db_url=args.db, jobs=args.jobs, fixed=_fixed(args.fix),
                               objective=args.objective,
                               progress=lambda msg: (bar.advance(task), bar.update(task, description=msg[:70])))
            table.add_row(f"{m} x {n} x {k}", str(res.trials), str(res.measured), str(res.pruned), str(res.failed),
                          f"{res.best_ms:.4f}" if res.best_ms else "—",
                          _compact(res.best_config.to_record()) if res.best_config else "—", f"{res.seconds:.0f}")
    console.print(table)
    return 0


def _gpu_list(text: str) -> list[int] | str:
    if text == "all":
        return text
    try:
        gpus = [int(g) for g in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpus takes 'all' or GPU indices such as 0,1; got {text!r}") from None
    if not gpus or min(gpus) < 0 or len(set(gpus)) != len(gpus):
        raise argparse.ArgumentTypeError(f"--gpus takes distinct non-negative GPU indices; got {text!r}")
    return gpus


def _resolve_gpus(gpus: list[int] | str | None) -> list[int]:
    if gpus != "all":
        return gpus or []
    import torch

    if not torch.cuda.is_available():
        raise DeviceError("--gpus all: no CUDA GPU is visible here")
    return list(range(torch.cuda.device_count()))


def _tune_on_gpus(problem: Any, family: str, gpus: list[int], args: argparse.Namespace, bar: Any, task: Any
                  ) -> tuple[str, ...]:
    """One process per GPU on a shared study; a table row summing theirs."""
    from .tune.gpus import tune_on_gpus

    t0 = time.time()
    runs = tune_on_gpus(problem, gpus, family=family, n_trials=args.trials, timeout_s=args.timeout,
                        storage=args.storage, db_url=args.db, fixed=_fixed(args.fix), objective=args.objective,
                        progress=lambda done, msg: bar.update(task, advance=1, description=msg[:70]))
    best = min((r for r in runs if r["best_ms"] is not None), key=lambda r: r["best_ms"], default=None)
    return (f"{problem.m} x {problem.n} x {problem.k} on GPUs {','.join(map(str, gpus))}",
            *(str(sum(r[f] for r in runs)) for f in ("asked", "measured", "pruned", "failed")),
            f"{best['best_ms']:.4f}" if best else "—", _compact(best["best_config"]) if best else "—",
            f"{time.time() - t0:.0f}")


def tuned_family(pattern: Any, m: int, k: int = 0) -> str:
    """The family ``matmul`` runs a ``pattern`` weight of ``k`` in_features (0: unknown) with at ``m`` tokens on this
    machine's GPU (sm_90 without one)."""
    import torch

    from .bench.run import NM_VECTOR
    from .routing import default_family, weight_class

    # the tuner times N:M weights of the format's default vector (make_weight): route as matmul routes those
    return default_family(torch.device("cuda") if torch.cuda.is_available() else None, weight_class(pattern), m,
                          pattern=pattern, vector=NM_VECTOR, k=k)


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench.suite import main as bench_main

    return bench_main(args)


def _problem_args(p: argparse.ArgumentParser) -> None:
    """The problem selection shared by build and tune: shapes or model layers, dtype, bias."""
    p.add_argument("--shape", type=_shape, action="append", help="M,N,K (tokens, out, in); repeatable")
    p.add_argument("--model", action="append", help="a model of the campaign file, e.g. llama-7b; repeatable")
    p.add_argument("--tokens", type=_count, default=2048, help="m for --model (default 2048)")
    p.add_argument("--campaigns", help="campaign file, JSON {model: [[layer, n, k], ...]} (default: the shipped one)")
    p.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    p.add_argument("--bias", action="store_true", help="kernels with a fused bias")


EXAMPLES = {
    "check": "example: cutlass-nm check --jobs 8",
    "build": "example: cutlass-nm build --model llama-7b --tokens 2048 --all-types",
    "tune": "example: cutlass-nm tune --model llama-7b --tokens 16 --pattern 2:8 --trials 60",
    "bench": "example: cutlass-nm bench --preset headline --dry-run",
    "db": "example: cutlass-nm db export --out records.jsonl",
}


def version() -> str:
    """The installed distribution's version, else the package's own."""
    from importlib import metadata

    try:
        return metadata.version("cutlass-nm")
    except metadata.PackageNotFoundError:
        from . import __version__

        return __version__


def _describe(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand's ``--help`` its one-line summary (argparse shows it only in the parent's list) and
    an example where there is one."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for choice in action._choices_actions:
            child = action.choices[choice.dest]
            if child.description is None and choice.help:
                child.description = choice.help[0].upper() + choice.help[1:] + "."
            if child.epilog is None and child.prog.split()[-1] in EXAMPLES and parser.prog == PROG:
                child.epilog = EXAMPLES[child.prog.split()[-1]]
            _describe(child)


def build_parser() -> argparse.ArgumentParser:
    """The ``cutlass-nm`` argument parser, with every subcommand."""
    from .families import FAMILIES

    parser = _Parser(prog=PROG, description="N:M-sparse GEMM kernels emitted with CUTLASS.",
                     epilog="User errors print one line and exit 2; --debug shows the traceback.")
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a user error (anywhere on the "
                        "command line)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="compile this machine's 2:4 kernels and verify them on its GPU")
    p.add_argument("--jobs", type=_count, default=None, help="parallel nvcc processes (default: all cores)")
    p.set_defaults(fn=cmd_check)
    p = sub.add_parser("build", help="precompile the kernels matmul picks for given shapes")
    _problem_args(p)
    p.add_argument("--family", action="append", choices=sorted(FAMILIES),
                   help="kernel family (repeatable; default: sptc24_sm90)")
    p.add_argument("--all-types", action="store_true",
                   help="every dtype (f16, bf16) x output (same, f32) x bias variant, not just --dtype/--bias")
    p.add_argument("--jobs", type=_count, default=None, help="parallel nvcc processes (default: all cores)")
    p.set_defaults(fn=cmd_build)
    p = sub.add_parser("cache", help="the compiled-kernel cache: its folder, kernels, size; clear or prune it",
                       description="With no subcommand: the folder, its kernel count and size.",
                       epilog="example: cutlass-nm cache prune --days 14 --dry-run")
    p.set_defaults(fn=cmd_cache, cache_command=None)
    cache = p.add_subparsers(dest="cache_command", metavar="{path,ls,clear,prune}")
    cache.add_parser("path", help="print the cache folder ($CUTLASS_NM_CACHE/kernels or the user cache dir)")
    cache.add_parser("ls", help="list compiled kernels, oldest first: name, size, build time, key")
    q = cache.add_parser("clear", help="delete every compiled kernel, its sidecars and failure logs")
    q.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    q = cache.add_parser("prune", help="delete kernels neither built nor loaded in the last --days days",
                         description="Delete kernels neither built nor loaded in the last --days days (loads are "
                         "seen through the file's access time where the filesystem keeps it), and failure logs "
                         "and leftovers of interrupted compiles older than that.")
    q.add_argument("--days", type=float, default=30.0, help="age limit in days (default 30)")
    q.add_argument("--dry-run", action="store_true", help="only say what would be deleted")
    db = sub.add_parser("db", help="the tuning database (default: $CUTLASS_NM_DB or SQLite in the user cache dir)",
                        description="Waits are bounded by $CUTLASS_NM_DB_TIMEOUT seconds (default 5). path, ls, show "
                        "and export never create, migrate or change a database; a SQLite file that is not a "
                        "cutlass_nm tuning database is refused, untouched.")
    db.add_argument("--url", help="SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db (password never printed)")
    dbs = db.add_subparsers(dest="db_command", required=True)
    dbs.add_parser("path", help="print the database URL")
    dbs.add_parser("upgrade", help="create or migrate the schema (Alembic)")
    for name, text in (("ls", "winners: the best config per (environment, problem)"),
                       ("show", "raw measurements, newest last")):
        p = dbs.add_parser(name, help=f"{text}; a table in a terminal, tab-separated lines when piped")
        p.add_argument("--family", help="only this kernel family")
        p.add_argument("--pattern", help="only this sparsity pattern, e.g. 2:4")
        p.add_argument("--shape", type=_shape, help="only this problem: M,N,K (M matches its power-of-two bucket)")
        p.add_argument("--n", type=int, help="only this n (out features)")
        p.add_argument("--k", type=int, help="only this k (in features)")
        if name == "ls":
            p.add_argument("--shipped", action="store_true", help="the configs shipped in the package instead (used "
                           "on their GPU where the tuning DB has no winner for the problem)")
    p.add_argument("--limit", type=int, default=50, help="the newest this many (default 50)")
    p = dbs.add_parser("export", help="every measurement as JSONL, after a metadata header line")
    p.add_argument("--out", help="file (default: stdout)")
    for name, text in (("import", "add exported records (files); idempotent"),
                       ("merge", "merge files or database URLs; idempotent, keeps the fastest per problem")):
        p = dbs.add_parser(name, help=f"{text}; all or nothing: one invalid record and nothing is written")
        p.add_argument("sources", nargs="+", help="JSONL export files or database URLs")
        p.add_argument("--this-gpu", action="store_true", help="skip records whose hard environment is not this GPU's")
        p.add_argument("--rejects", help="on rejection, write every rejected line and its reason to this file")
    p = dbs.add_parser("gc", help="delete records of environments built from other kernel templates")
    p.add_argument("--dry-run", action="store_true")
    db.set_defaults(fn=cmd_db)
    p = sub.add_parser("tune", help="tune problems or a model's layers on this GPU; winners go to the tuning DB")
    _problem_args(p)
    p.add_argument("--pattern", default="2:4", help="2:4, V:N:M (e.g. 128:2:8) or N:M (e.g. 2:8); winners are kept "
                   "per pattern (default 2:4)")
    p.add_argument("--family", help="the kernel family to tune (default: the one matmul picks for the pattern and m)")
    p.add_argument("--trials", type=_count, default=40, help="Optuna trials per problem (default 40)")
    p.add_argument("--timeout", type=float, help="seconds per problem")
    p.add_argument("--storage", help="Optuna storage URL (default: in memory); share one to tune from many GPUs")
    p.add_argument("--db", help="tuning DB URL (default: $CUTLASS_NM_DB or the user cache's SQLite)")
    p.add_argument("--fix", action="append", help="pin a parameter, e.g. --fix stages=0; repeatable")
    p.add_argument("--jobs", type=_count, help="parallel nvcc processes (default: all cores)")
    p.add_argument("--objective", default="time", choices=("time", "energy", "edp", "pareto"),
                   help="minimize time (default), energy per call (NVML), energy x time, or both (Pareto study)")
    p.add_argument("--gpus", type=_gpu_list, help="tune on several GPUs of this host, one process each sharing one "
                   "study: 'all' or indices, e.g. 0,1 (--trials is per GPU; --storage defaults to a journal file)")
    p.set_defaults(fn=cmd_tune)
    p = sub.add_parser("bench", help="time every family against cuBLAS and cuSPARSELt (seed shape sets, reports)")
    from .bench.suite import add_arguments as bench_arguments

    bench_arguments(p)
    p.set_defaults(fn=cmd_bench)
    _describe(parser)
    return parser


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    more = f" (and {len(lines) - 1} more line(s): rerun with --debug)" if len(lines) > 1 else ""
    return lines[0] + more


def main(argv: Sequence[str] | None = None) -> int:
    """Run a ``cutlass-nm`` command; return its exit status. A user error (any ``CutlassNMError``, a bad command
    line, a file that cannot be opened) prints ``cutlass-nm: error: <one line>`` and returns 2; Ctrl-C returns
    130; an unexpected exception is a bug: its traceback, then a line saying so, and 1. ``--debug`` re-raises."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # anywhere on the line, and also for errors of the command line itself
    try:
        args = build_parser().parse_args([a for a in argv if a != "--debug"])
        if getattr(args, "family", None) is None and args.command == "build":
            args.family = ["sptc24_sm90"]
        return args.fn(args)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (CutlassNMError, *USER_OS_ERRORS) as exc:
        if debug:
            raise
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:
        if debug:
            raise
        traceback.print_exc()
        print(f"{PROG}: internal error ({type(exc).__name__}), a bug: please report it with the traceback above",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

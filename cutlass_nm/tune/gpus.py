"""One tuning process per GPU of this host, all sharing one Optuna study (a journal file) and the tuning DB.

The DB's claims keep two processes from measuring one config; each process pins its GPU with
``CUDA_VISIBLE_DEVICES`` before CUDA starts and compiles with its share of the CPU cores. Across hosts, give
every host the same PostgreSQL URL as ``storage`` and ``db_url`` instead (``cutlass-nm tune --storage``).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..families import Problem


def default_storage() -> str:
    """A journal file in the user cache folder, shared by this host's tuning processes."""
    import platformdirs

    folder = Path(platformdirs.user_cache_dir("cutlass_nm"))
    folder.mkdir(parents=True, exist_ok=True)
    return f"journal:{folder / 'optuna_journal.log'}"


def _stand_in(problem: Problem) -> dict[str, Any]:
    """The performance model instead of a GPU and no compiles (checks the multi-process plumbing on a CPU)."""
    from ..families import perfmodel
    from ..store.fingerprint import EnvFields

    def measure(cfg: Any, reps: int = 50) -> dict:
        t = perfmodel.estimate_ms(cfg, problem)
        return {"status": "ok", "p20_ms": t, "p50_ms": t, "p80_ms": t, "iterations": reps}

    env = EnvFields(gpu="stand-in", compute_capability="9.0a", sm_count=132, l2_bytes=50 << 20, cutlass_version="-",
                    nvcc_version="-", template_hash="-", driver="-", torch_version="-")
    return {"measure": measure, "build": lambda cfg: None, "env": env}


def _worker(gpu: int, problem: Problem, kwargs: dict[str, Any], log: str, stand_in: bool) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)  # before anything in this process starts CUDA
    from .tuner import tune_problem

    t0 = time.time()
    with open(log, "w") as f:
        def progress(msg: str) -> None:
            f.write(json.dumps({"t": time.time() - t0, "msg": msg}) + "\n")
            f.flush()

        res = tune_problem(problem, seed=gpu, progress=progress, **kwargs, **(_stand_in(problem) if stand_in else {}))
        f.write(json.dumps({"t": time.time() - t0, "done": True, "gpu": gpu, "asked": res.trials,
                            "measured": res.measured, "pruned": res.pruned, "failed": res.failed,
                            "trials": [h["trial"] for h in res.history], "best_ms": res.best_ms,
                            "best_config": res.best_config.to_record() if res.best_config else None}) + "\n")


def tune_on_gpus(problem: Problem, gpus: Sequence[int], *, family: str, n_trials: int = 40,
                 timeout_s: float | None = None, storage: str | None = None, db_url: str | None = None,
                 fixed: dict[str, Any] | None = None, objective: str = "time", stand_in: bool = False,
                 progress: Callable[[int, str], None] | None = None) -> list[dict]:
    """Tune ``problem`` with one process per GPU in ``gpus``, each asking ``n_trials`` of the shared study.

    Returns one summary per GPU (trials asked, measured, pruned, failed, its best). ``progress(done, msg)`` is
    called as trials finish, with the count over all processes. Raises RuntimeError naming a GPU whose process
    failed."""
    if not gpus:
        raise ValueError("give at least one GPU index")
    kwargs = {"family": family, "n_trials": n_trials, "timeout_s": timeout_s, "storage": storage or default_storage(),
              "db_url": db_url, "jobs": max(1, (os.cpu_count() or 1) // len(gpus)), "fixed": fixed,
              "objective": objective}
    from ..store.store import Store

    Store(db_url)  # the schema, once, before the processes race for it
    work = Path(tempfile.mkdtemp(prefix="cutlass_nm_tune_"))
    logs = [work / f"gpu{g}.jsonl" for g in gpus]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(g, problem, kwargs, str(log), stand_in))
             for g, log in zip(gpus, logs, strict=True)]
    for p in procs:
        p.start()
    seen = [0] * len(logs)
    while any(p.is_alive() for p in procs):
        time.sleep(0.5)
        _report(gpus, logs, seen, progress)
    _report(gpus, logs, seen, progress)
    summaries = []
    for g, p, log in zip(gpus, procs, logs, strict=True):
        lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        done = next((x for x in lines if x.get("done")), None)
        if p.exitcode != 0 or done is None:
            raise RuntimeError(f"the tuning process on GPU {g} failed (exit code {p.exitcode}); its log: {log}")
        summaries.append(done)
    return summaries


def _report(gpus: Sequence[int], logs: list[Path], seen: list[int], progress: Callable[[int, str], None] | None
            ) -> None:
    """Call ``progress`` for the trial lines each GPU's log gained since ``seen`` (updated in place)."""
    for i, (gpu, log) in enumerate(zip(gpus, logs, strict=True)):
        lines = [x for x in log.read_text().splitlines() if '"msg"' in x] if log.exists() else []
        for line in lines[seen[i]:]:
            seen[i] += 1
            if progress is not None:
                progress(sum(seen), f"GPU {gpu}: {json.loads(line)['msg']}")

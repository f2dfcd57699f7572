"""Turn timed benchmark runs into tuning records that ``cutlass-nm db import`` accepts.

    python3 db/records_from_bench.py cutlass_nm/configs/h100-80gb-hbm3.env.json \
        benchmarks/results/h100/sptc24_llm.json benchmarks/results/h100/sptc24_contested.json \
        > cutlass_nm/configs/h100-80gb-hbm3.jsonl

The environment file is the machine part of the fingerprint (``cutlass_nm.store.fingerprint``) printed on
the machine that ran the benchmarks; the template hash is the family's, computed here from this checkout's
templates, so run this at a commit whose ``sptc24_sm90`` kernels are those the benchmarks timed. Every timed
sm90 row (sweep, heuristic, tuned) becomes one ok measurement; uids are derived from the run and the config,
so regenerating gives the same records and importing twice adds nothing.

A run of ``benchmarks/interleave_sptc24.py`` (rows with ``configs``) is the re-timing step the tuner does before
it records a winner: for its shapes, only its measurements are kept (the median over interleaved rounds of
steady-state timing), and the sweeps' rows of those shapes are left out. Sweep points are short measurements
taken between others; on a power-limited H100 their medians moved by up to 15 % with what ran before, so the
fastest of many of them is not a winner until re-timed.
"""

from __future__ import annotations

import json
import statistics
import sys
import uuid

from cutlass_nm.families import KernelTypes, Problem
from cutlass_nm.store.fingerprint import EnvFields, ProblemKey, template_hash
from cutlass_nm.store.store import FORMAT

NAMESPACE = uuid.UUID("6f1c2a52-8d3e-4c1b-9a57-0c6f5b1d2e41")
SM90_ROWS = ("sptc24_sm90_sweep", "sptc24_sm90_heuristic", "sptc24_sm90_tuned")


def _record(env: EnvFields, run: dict, impl: str, row: dict, dtype: str, cfg: dict, p20: float, p50: float,
            p80: float, iterations: int, study: str) -> dict:
    """One ok measurement of ``cfg`` on the row's shape; the uid derives from the run, the implementation and the
    config, so regenerating gives the same records."""
    key = ProblemKey.of("sptc24_sm90", Problem(row["m"], row["n"], row["k"], KernelTypes(dtype, dtype, False)))
    uid = uuid.uuid5(NAMESPACE, json.dumps([run["commit"], run["date"], impl, row["m"], row["n"], row["k"], cfg],
                                           sort_keys=True))
    return {**key.to_dict(), "environment": env.to_dict(), "hard_key": env.hard_key, "m": row["m"], "config": cfg,
            "status": "ok", "p20_ms": p20, "p50_ms": p50, "p80_ms": p80, "iterations": iterations,
            "host": "h100-device", "study": f"{study}@{run['commit']}", "trial": None, "uid": str(uid),
            "created_at": run["date"]}


def retimed_records(bench: dict, env: EnvFields) -> list[dict]:
    """One measurement per config of each interleaved row: p50 = median over rounds, p20 / p80 over rounds."""
    out = []
    for row in bench["rows"]:
        for name, cfg in row["configs"].items():
            rounds = sorted(row["times_ms"][name])
            q = statistics.quantiles(rounds, n=5) if len(rounds) > 1 else rounds * 4
            out.append(_record(env, bench["environment"], name, row, "f16", cfg, q[0], row["median_ms"][name], q[3],
                               row["rounds"] * row["reps"], "interleave_sptc24"))
    return out


def records(bench: dict, env: EnvFields, retimed: frozenset = frozenset()) -> list[dict]:
    """Every timed sm90 row of a bench_sptc24 run, except the shapes in ``retimed``."""
    return [_record(env, bench["environment"], row["impl"], row, row["dtype"], row["config"], row["p20_ms"],
                    row["median_ms"], row["p80_ms"], row["reps"], "bench_sptc24")
            for row in bench["rows"]
            if row.get("impl") in SM90_ROWS and "median_ms" in row and (row["m"], row["n"], row["k"]) not in retimed]


def main() -> None:
    with open(sys.argv[1]) as f:
        env = EnvFields(**json.load(f), template_hash=template_hash("sptc24_sm90"))
    benches = []
    for path in sys.argv[2:]:
        with open(path) as f:
            benches.append(json.load(f))
    interleaved = [b for b in benches if b["rows"] and "configs" in b["rows"][0]]
    swept = [b for b in benches if not (b["rows"] and "configs" in b["rows"][0])]
    retimed = frozenset((r["m"], r["n"], r["k"]) for b in interleaved for r in b["rows"])
    recs = [r for bench in swept for r in records(bench, env, retimed)]
    recs += [r for bench in interleaved for r in retimed_records(bench, env)]
    print(json.dumps({"format": FORMAT, "exported_at": max(b["environment"]["date"] for b in benches),
                      "source": " ".join(sys.argv[2:]), "records": len(recs)}))
    for r in recs:
        print(json.dumps(r))


if __name__ == "__main__":
    main()

"""``sparsify`` keeps a layer sparse only where it wins: a decoder layer with small GQA projections, decided at
the token counts given, then every layer timed again (dense against what sparsify left) in the same run.

    python3 benchmarks/bench_sparsify.py --model qwen2.5-7b --pattern 2:4 --tokens 1,2048 --out sparsify.json

The model's linear layers (a shipped campaign: q, k, v, o, gate, up, down) are built with random fp16 weights.
Rows: one per (layer, m): the decision, the speedup sparsify measured, and ``median_ms`` of the module it left
against ``baseline_median_ms`` of the dense layer, timed again afterwards (``speedup_vs_dense``).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch
from torch import nn

import cutlass_nm
from cutlass_nm.bench.env import environment
from cutlass_nm.campaigns import load_models
from cutlass_nm.decisions import time_module


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-7b", help="a shipped campaign (default qwen2.5-7b: 512-wide k/v)")
    ap.add_argument("--pattern", default="2:4")
    ap.add_argument("--tokens", default="1,2048", help="token counts sparsify decides at (comma-separated)")
    ap.add_argument("--min-speedup", type=float, default=1.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    tokens = tuple(int(t) for t in args.tokens.split(","))
    layers = load_models()[args.model]
    torch.manual_seed(0)
    dense = nn.ModuleDict({name: nn.Linear(k, n, bias=False) for name, n, k in layers}).half().cuda()
    model = copy.deepcopy(dense)
    cutlass_nm.sparsify(model, args.pattern, tokens=tokens, min_speedup=args.min_speedup)
    summary = model.sparsify_summary
    print(summary.table(), flush=True)
    rows = []
    for d in summary.decisions:
        for m in tokens:
            t_dense, t_kept = time_module(dense[d.name], m), time_module(model[d.name], m)
            rows.append({"family": None, "impl": f"sparsify_{d.decision}", "pattern": args.pattern, "dtype": "f16",
                         "m": m, "n": d.shape[0], "k": d.shape[1], "name": f"{args.model}.{d.name}",
                         "decision": d.decision, "decided_speedup": d.speedup.get(m), "median_ms": t_kept,
                         "baseline": "cublas", "baseline_median_ms": t_dense, "speedup_vs_dense": t_dense / t_kept})
            print(f"{d.name:10} m={m:5} {d.decision:6} decided {d.speedup.get(m, float('nan')):.2f}x, "
                  f"re-timed {t_dense / t_kept:.2f}x", flush=True)
    env = {**environment(), "command": " ".join(sys.argv)}
    args.out.write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    slower = [r for r in rows if r["decision"] == "sparse" and r["speedup_vs_dense"] < 1.0]
    print(f"{len(summary.kept_dense)} of {len(summary.decisions)} layers kept dense; kept-sparse layers slower "
          f"than dense when re-timed: {len(slower)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Leave-one-model-out check of the config model on a shipping grid's measurements (no GPU needed).

    python3 tuning/validate_model.py benchmarks/results/h100/sptc24_shipping_grid.json

For each tune model, its problems are predicted from the other models' winners only (``store.predict``), and the
predicted config's measured time is compared with the best candidate measured on that problem; the family's
heuristic is scored the same way. Prints, per m, the geomean and worst time over the grid's best.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from collections import defaultdict
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("measurements", type=Path, help="a ship_configs.py --measurements JSON (suite row schema)")
    args = ap.parse_args(argv)
    from cutlass_nm.campaigns import load_models, split_models
    from cutlass_nm.families import Problem, get_family
    from cutlass_nm.store.fingerprint import ProblemKey
    from cutlass_nm.store.predict import predict
    from cutlass_nm.store.shipped import Tuned

    rows = json.loads(args.measurements.read_text())["rows"]
    family = get_family(rows[0]["family"])
    spec = importlib.util.spec_from_file_location("ship_configs", Path(__file__).with_name("ship_configs.py"))
    ship = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ship)
    types = ship.kernel_types(rows[0]["dtype"])  # what the grid's problems ran (e4m3 GEMMs write bf16)
    pattern = rows[0]["pattern"]
    times: dict[tuple[int, int, int], dict[str, float]] = defaultdict(dict)
    for r in rows:
        times[(r["m"], r["n"], r["k"])][json.dumps(r["config"], sort_keys=True)] = r["median_ms"]
    models = load_models()
    scores: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for model in split_models("tune"):
        own = {(n, k) for _, n, k in models[model]}
        tuned = {}
        for (m, n, k), by_cfg in times.items():
            if (n, k) not in own:
                best = min(by_cfg, key=by_cfg.__getitem__)
                tuned[ProblemKey.of(family.name, Problem(m, n, k, types, pattern))] = Tuned(
                    family.Config.from_record(json.loads(best)), by_cfg[best])
        for (m, n, k), by_cfg in times.items():
            if (n, k) not in own:
                continue
            problem, best = Problem(m, n, k, types, pattern), min(by_cfg.values())
            worst = max(by_cfg.values())  # a config the grid did not time at this m counts as its slowest
            picks = (predict(family, problem, tuned, 132), family.heuristic(problem))
            scores[m].append(tuple((worst if c is None else by_cfg.get(json.dumps(c.to_record(), sort_keys=True),
                                                                       worst)) / best for c in picks))

    def geo(v: list[float]) -> float:
        return math.exp(sum(math.log(x) for x in v) / len(v))

    print("m      problems  model: geomean (worst)  heuristic: geomean (worst)   [time / the grid's best]")
    for m in sorted(scores):
        model, heur = ([s[i] for s in scores[m]] for i in (0, 1))
        print(f"{m:<6} {len(model):>8}  {geo(model):>13.3f} ({max(model):.2f})  {geo(heur):>17.3f} ({max(heur):.2f})")
    model, heur = ([s[i] for v in scores.values() for s in v] for i in (0, 1))
    print(f"{'all':<6} {len(model):>8}  {geo(model):>13.3f} ({max(model):.2f})  {geo(heur):>17.3f} ({max(heur):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

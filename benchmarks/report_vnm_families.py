"""Side-by-side markdown of a bench_vnm.py JSON: per (pattern, shape), cuBLAS and each vnm family's best config.

    python3 benchmarks/report_vnm_families.py benchmarks/results/h100/vnm_sm80_vs_sm90.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def side_by_side(data: dict) -> str:
    rows = data["rows"]
    env = data["environment"]
    families = sorted({r["kernel"].split("[")[0] for r in rows})
    best: dict[tuple, dict] = {}
    for r in rows:
        key = (r["pattern"], r["m"], r["n"], r["k"], r["kernel"].split("[")[0])
        if key not in best or r["median_ms"] < best[key]["median_ms"]:
            best[key] = r
    shapes = list(dict.fromkeys((r["pattern"], r["m"], r["n"], r["k"]) for r in rows))
    head = " | ".join(f"{f} ms | {f} vs cuBLAS" for f in families)
    lines = [f"# V:N:M SpMM, {' vs '.join(families)}, against cuBLAS dense fp16 ({env.get('gpu', '')})", "",
             "Best measured config per family and row (configs listed below); times include each family's "
             "per-call transpose of x; median of CUDA-graph replays, inputs and weights rotated past L2; cuBLAS "
             "timed in the same run.", "",
             f"| pattern | m x n x k | cuBLAS ms | {head} | fastest | rel err (max) |",
             "|---|---|---|" + "---|---|" * len(families) + "---|---|"]
    for s in shapes:
        rs = [best.get((*s, f)) for f in families]
        cells = " | ".join(f"{r['median_ms']:.4f} | **{r['speedup_vs_cublas']:.2f}x**" if r else "- | -" for r in rs)
        cublas = next(r for r in rs if r)["cublas_ms"]
        err = max(r["rel_err"] for r in rs if r)
        fastest = min((r for r in rs if r), key=lambda r: r["median_ms"])["kernel"].split("[")[0]
        lines.append(f"| {s[0]} | {s[1]} x {s[2]} x {s[3]} | {cublas:.4f} | {cells} | {fastest} | {err:.1e} |")
    lines += ["", "Configs: " + "; ".join(sorted({r["kernel"] for r in best.values()})) + ".", "",
              f"Environment: {json.dumps({k: env[k] for k in sorted(env)})}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", type=Path)
    ap.add_argument("--out", type=Path, help="default: the JSON's path with .md")
    args = ap.parse_args()
    md = side_by_side(json.loads(args.json.read_text()))
    (args.out or args.json.with_suffix(".md")).write_text(md)
    print(md)


if __name__ == "__main__":
    main()

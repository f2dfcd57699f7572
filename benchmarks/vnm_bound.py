"""The L2-read floor of a Hopper V:N:M GEMM that feeds wgmma.sp a per-V-block gathered B, against issue 5's
targets (3x over cuBLAS at V:2:8, 5x at V:2:16), for every acceptance shape (issue 5). CPU only: it reads
measured rates and times from committed results and does arithmetic.

    python3 benchmarks/vnm_bound.py --out benchmarks/results/h100/vnm_bound.md

Bytes a call must move, whatever the tiling, when wgmma.sp reads B (the gathered rows of xᵀ) from shared memory:
- B: each block of V weight rows keeps its own 4 of every M columns, so each V-block needs its own gathered rows
  of xᵀ for every token: ceil(n / V) · m · (4 · ceil(k / M)) · 2 bytes through L2 (rows of different V-blocks
  differ; a dense x slab shared by R V-blocks only cuts bytes when R > M / 4, and then A's re-reads and the
  accumulator budget cancel it; ``NOTES.md``, ``vnm.md``).
- A and its metadata: counted once (a generous floor: real tiles re-read them once per token tile).
- The transpose of x that makes xᵀ's rows gatherable, shown separately and counted as generously as possible: x
  read once from HBM (the benchmark rotates inputs past L2) at the measured HBM read rate, xᵀ's writes free (as if
  it stayed in L2). A caller that already holds xᵀ (the gated MLP's down projection) skips it; gathering from x
  itself reads whole M-groups of each token row, 2x (2:8) or 4x (2:16) the gathered bytes.

The floor is those bytes at the measured L2 read rate (``l2_bandwidth.json``, the best row); the ceiling on the
speedup is cuBLAS's time over the floor, taking the slowest cuBLAS time any committed vnm_sm90 run measured for
the shape (the reading most favourable to a sparse kernel), and again at the highest fraction of the L2 rate a
kernel here has sustained (``BEST_L2_FRACTION``).
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "h100"
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 4096, 4096), (2048, 11008, 4096), (2048, 4096, 11008),
          (2048, 12288, 4096)]
TARGETS = {"128:2:8": 3.0, "128:2:16": 5.0}
BEST_L2_FRACTION = 0.81  # vnm_sm90 at 8192³ 2:8, ~5.9 of 7.25 TB/s (NOTES.md, "what bounds a wgmma.sp k-tile")


def gathered_bytes(m: int, n: int, k: int, v: int, big_m: int) -> tuple[int, int]:
    """(B gathered, A values + 2:4 metadata + column indices) in bytes for one call."""
    groups, blocks = -(-k // big_m), -(-n // v)
    b = blocks * m * 4 * groups * 2
    a = n * 2 * groups * 2 + n * groups + blocks * groups * 4  # fp16 values, a metadata byte per group, uint8 cols
    return b, a


def best_measured(root: Path) -> dict[tuple, dict]:
    """Per (pattern, m, n, k): the committed vnm_sm90 row with the best ratio over its same-run cuBLAS, and
    (``slowest_cublas_ms``) the slowest cuBLAS time of any such row."""
    best: dict[tuple, dict] = {}
    slowest: dict[tuple, float] = {}
    for path in sorted(glob.glob(str(root / "*.json"))):
        try:
            rows = json.loads(Path(path).read_text()).get("rows")
        except (ValueError, AttributeError):
            continue
        for r in rows if isinstance(rows, list) else []:
            if not (isinstance(r, dict) and str(r.get("kernel", "")).startswith("vnm_sm90") and "cublas_ms" in r):
                continue
            key = (r["pattern"], r["m"], r["n"], r["k"])
            ratio = r["cublas_ms"] / r["median_ms"]
            slowest[key] = max(slowest.get(key, 0.0), r["cublas_ms"])
            if key not in best or ratio > best[key]["ratio"]:
                best[key] = {**r, "ratio": ratio, "file": Path(path).name}
    return {key: {**r, "slowest_cublas_ms": slowest[key]} for key, r in best.items()}


def table(root: Path) -> str:
    probe = json.loads((root / "l2_bandwidth.json").read_text())["rows"]
    l2 = max(r["tb_per_s"] for r in probe) * 1e12
    hbm = max(r["tb_per_s"] for r in probe if r["buffer_mb"] > 200) * 1e12  # buffers far past the 50 MB L2
    measured = best_measured(root)
    lines = [
        "# The L2 floor of a per-V-block gathered B on the H100, against issue 5's targets", "",
        f"Measured read rates (`l2_bandwidth.json`, best rows): L2 {l2 / 1e12:.2f} TB/s, HBM {hbm / 1e12:.2f} TB/s. "
        "Command: `python3 benchmarks/vnm_bound.py "
        "--out benchmarks/results/h100/vnm_bound.md` (arithmetic on committed measurements; see its docstring).", "",
        "| pattern | m x n x k | B gathered MB | A MB | floor µs (L2) | + xᵀ µs | cuBLAS µs (slowest run) | "
        "target µs | ceiling, xᵀ free | L2 rate the target needs, xᵀ free | ceiling with xᵀ | with xᵀ at "
        f"{BEST_L2_FRACTION:.0%} of L2 | best measured (file) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for pattern, target in TARGETS.items():
        v, _, big_m = (int(t) for t in pattern.split(":"))
        for m, n, k in SHAPES:
            b, a = gathered_bytes(m, n, k, v, big_m)
            floor = (b + a) / l2 * 1e6
            transpose = m * k * 2 / hbm * 1e6
            r = measured.get((pattern, m, n, k))
            if r is None:
                continue
            cublas = r["slowest_cublas_ms"] * 1e3
            real = floor / BEST_L2_FRACTION + transpose
            lines.append(
                f"| {pattern} | {m} x {n} x {k} | {b / 1e6:.0f} | {a / 1e6:.0f} | {floor:.0f} | {transpose:.0f} | "
                f"{cublas:.0f} | {cublas / target:.0f} | {cublas / floor:.2f}x | {floor * target / cublas:.0%} | "
                f"{cublas / (floor + transpose):.2f}x "
                f"| {cublas / real:.2f}x | {r['ratio']:.2f}x ({r['file']}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    text = table(args.results)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()

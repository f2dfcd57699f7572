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
- The transpose of x that makes xᵀ's rows gatherable (a read and a write of m · k · 2 bytes at copy bandwidth),
  shown separately: a caller that already holds xᵀ (the gated MLP's down projection) skips it.

The floor is those bytes at the measured L2 read rate (``l2_bandwidth.json``, the best row); the ceiling on the
speedup is cuBLAS's time (measured in the same run as our best vnm_sm90 time, committed JSON) over the floor.
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


def gathered_bytes(m: int, n: int, k: int, v: int, big_m: int) -> tuple[int, int]:
    """(B gathered, A values + 2:4 metadata + column indices) in bytes for one call."""
    groups, blocks = -(-k // big_m), -(-n // v)
    b = blocks * m * 4 * groups * 2
    a = n * 2 * groups * 2 + n * groups + blocks * groups * 4  # fp16 values, a metadata byte per group, uint8 cols
    return b, a


def best_measured(root: Path) -> dict[tuple, dict]:
    """Per (pattern, m, n, k): the committed vnm_sm90 row with the best ratio over its same-run cuBLAS."""
    best: dict[tuple, dict] = {}
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
            if key not in best or ratio > best[key]["ratio"]:
                best[key] = {**r, "ratio": ratio, "file": Path(path).name}
    return best


def table(root: Path) -> str:
    l2 = max(r["tb_per_s"] for r in json.loads((root / "l2_bandwidth.json").read_text())["rows"]) * 1e12
    copy = json.loads((root / "nm_decode_v32_f9be544.json").read_text())["copy_bandwidth_Bps"]
    measured = best_measured(root)
    lines = [
        "# The L2 floor of a per-V-block gathered B on the H100, against issue 5's targets", "",
        f"Measured rates: L2 read {l2 / 1e12:.2f} TB/s (`l2_bandwidth.json`, best row), device copy "
        f"{copy / 1e12:.2f} TB/s (`nm_decode_v32_f9be544.json`). Command: `python3 benchmarks/vnm_bound.py "
        "--out benchmarks/results/h100/vnm_bound.md` (arithmetic on committed measurements; see its docstring).", "",
        "| pattern | m x n x k | B gathered MB | A MB | floor µs (L2) | + xᵀ µs | cuBLAS µs | target µs | "
        "ceiling, no xᵀ | ceiling with xᵀ | best measured (file) |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    for pattern, target in TARGETS.items():
        v, _, big_m = (int(t) for t in pattern.split(":"))
        for m, n, k in SHAPES:
            b, a = gathered_bytes(m, n, k, v, big_m)
            floor = (b + a) / l2 * 1e6
            transpose = 2 * m * k * 2 / copy * 1e6
            r = measured.get((pattern, m, n, k))
            if r is None:
                continue
            cublas = r["cublas_ms"] * 1e3
            lines.append(
                f"| {pattern} | {m} x {n} x {k} | {b / 1e6:.0f} | {a / 1e6:.0f} | {floor:.0f} | {transpose:.0f} | "
                f"{cublas:.0f} | {cublas / target:.0f} | {cublas / floor:.2f}x | {cublas / (floor + transpose):.2f}x "
                f"| {r['ratio']:.2f}x ({r['file']}) |")
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

"""FP8 (e4m3) 2:4, N:M and V:N:M against dense FP8, cuSPARSELt FP8 and fp16 dense, one process, LLM layer shapes.

    python3 benchmarks/bench_fp8.py --out results/h100/fp8_sptc24.json
    python3 benchmarks/bench_fp8.py --tokens 2048,8192 --shapes 4096x4096,14336x4096
    python3 benchmarks/bench_fp8.py --patterns 2:8,128:2:8 --tokens 1     # FP8 N:M / V:N:M decode

Per (m, n, k): ``cutlass_nm.matmul`` on an FP8 2:4 weight with an e4m3 x and per-token scales (bf16 out), against
``torch._scaled_mm`` (cuBLASLt dense FP8, row-wise scales), ``torch._cslt_sparse_mm`` on FP8 2:4 (cuSPARSELt, where
this torch build runs it; the row says why where it does not) and fp16 ``F.linear``. CUDA-graph medians with inputs
rotated past L2 (``cutlass_nm.timing``); ``speedup_vs_*`` are ratios to the baselines timed in the same run;
``rel_err`` is against an fp32 reference of the dequantized operands. At m = 1 (the decode path) the rows add the
fraction of the bytes ratio over the fastest dense kernel that ours reaches, and that cuBLAS reaches when it streams
the same bytes as an fp16 weight (``same_bytes_fp16_ms``): the limit a kernel as fast as cuBLAS would meet. N:M and
V:N:M patterns run every m on their FP8 families (``vnm_fp8_sm90`` forced above one token; N:M one token only);
their rows add the same pattern's 16-bit weight on its own path (``ours_16bit_ms``): what an FP8 N:M or V:N:M
weight runs by default above one token (its 16-bit twin).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch

import cutlass_nm
from cutlass_nm import Pattern
from cutlass_nm.families.decode24_fp8.family import BYTES_PER_WEIGHT as DECODE_BYTES_PER_WEIGHT
from cutlass_nm.families.nm_decode_fp8.family import streamed_bytes as nm_streamed_bytes
from cutlass_nm.formats.fp8 import E4M3, dequantize_rows, quantize_rows
from cutlass_nm.timing import copies_to_rotate, time_rotating

SHAPES = ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336), (1024, 4096))  # (n, k)
TOKENS = (1, 512, 2048, 4096, 8192)


def _parse_shapes(text: str) -> tuple[tuple[int, int], ...]:
    return tuple(tuple(int(v) for v in s.split("x")) for s in text.split(","))  # type: ignore[misc]


def _time(fn: Callable[[int], object], copies: int) -> float:
    return time_rotating(fn, copies).p50_ms


def _cusparselt(xq: list[torch.Tensor], wq: list[torch.Tensor]) -> tuple[Callable[[int], object] | None, str]:
    """cuSPARSELt FP8 2:4 through torch, or None and why it does not run here."""
    try:
        packed = [torch._cslt_compress(w) for w in wq]
        fn = lambda i: torch._cslt_sparse_mm(packed[i], xq[i].t(), out_dtype=torch.bfloat16)  # noqa: E731
        fn(0)
        torch.cuda.synchronize()
        return fn, ""
    except Exception as exc:  # a build without FP8 cuSPARSELt: recorded, not fatal
        return None, f"{type(exc).__name__}: {str(exc)[:160]}"


def streamed_bytes(w: object) -> float:
    """The bytes the FP8 decode path streams for the weight: values and positions or metadata (and row scales)."""
    if w.pattern.is_24:
        return w.out_features * w.in_features * DECODE_BYTES_PER_WEIGHT + 4 * w.out_features
    return nm_streamed_bytes(w)


def bench_shape(m: int, n: int, k: int, pattern: str = "2:4") -> dict:
    copies = copies_to_rotate(n * k + m * k)
    dense16 = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(copies)]
    w8 = [cutlass_nm.prune(w, pattern, dtype=E4M3)[0] for w in dense16]
    gemm = "sptc24_fp8_sm90" if pattern == "2:4" else "vnm_fp8_sm90"
    family = gemm if m > 1 else "decode24_fp8" if pattern == "2:4" else "nm_decode_fp8"
    x16 = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    xs = [quantize_rows(x) for x in x16]
    xq, sx = [q for q, _ in xs], [s for _, s in xs]
    forced = family if family == "vnm_fp8_sm90" else None  # the default path runs the 16-bit twin (ours_16bit_ms)
    ours = lambda i: cutlass_nm.matmul(xq[i], w8[i], x_scale=sx[i], family=forced)  # noqa: E731
    y = ours(0)
    ref = dequantize_rows(xq[0], sx[0]).double() @ w8[0].to_dense().double().T
    row = {"family": family, "impl": family, "pattern": pattern, "dtype": "e4m3", "m": m,
           "n": n, "k": k, "rel_err": ((y.double() - ref).norm() / ref.norm()).item()}
    row["median_ms"] = _time(ours, copies)
    # dense FP8 on the same (pruned) weights, row-wise scales: what cuBLASLt gives an FP8 user
    wd = [quantize_rows(w.to_dense()) for w in w8]
    dense8 = lambda i: torch._scaled_mm(xq[i], wd[i][0].t(), scale_a=sx[i][:, None], scale_b=wd[i][1][None, :],  # noqa: E731
                                        out_dtype=torch.bfloat16)
    row["dense_fp8_ms"] = _time(dense8, copies)
    fp16 = [w.half() for w in dense16]
    xh = [x.half() for x in x16]
    row["dense_fp16_ms"] = _time(lambda i: torch.nn.functional.linear(xh[i], fp16[i]), copies)
    cslt, why = _cusparselt(xq, [w.to_dense().to(E4M3) for w in w8]) if pattern == "2:4" else (None, "")
    row["cusparselt_fp8_ms"] = _time(cslt, copies) if cslt else None
    if why:
        row["cusparselt_fp8_note"] = why
    row["speedup_vs_dense_fp8"] = row["dense_fp8_ms"] / row["median_ms"]
    row["speedup_vs_fp16"] = row["dense_fp16_ms"] / row["median_ms"]
    if cslt:
        row["speedup_vs_cusparselt_fp8"] = row["cusparselt_fp8_ms"] / row["median_ms"]
    if m == 1:  # the decode path: also a 16-bit x as it comes, and the speedup over the bytes it saves
        x16 = [x.to(torch.bfloat16) for x in x16]
        row["median_ms_x16"] = _time(lambda i: cutlass_nm.matmul(x16[i], w8[i]), copies)
        fastest = min(("dense_fp8", n * k), ("dense_fp16", 2 * n * k), key=lambda d: row[f"{d[0]}_ms"])
        row["fastest_dense"] = fastest[0]
        ours_bytes = streamed_bytes(w8[0])
        row["bytes_ratio_vs_fastest_dense"] = fastest[1] / ours_bytes
        for key, ms in (("", row["median_ms"]), ("_x16", row["median_ms_x16"])):
            row[f"fraction_of_bytes_ratio{key}"] = row[f"{fastest[0]}_ms"] / ms / row["bytes_ratio_vs_fastest_dense"]
        # the same bytes through cuBLAS: an fp16 weight of n x (k x DECODE_BYTES_PER_WEIGHT / 2), what the fastest
        # dense kernel makes of this many bytes (the fraction a kernel streaming as well as cuBLAS would reach)
        narrow = [torch.randn(n, int(ours_bytes / n / 2), device="cuda", dtype=torch.half)
                  for _ in range(copies)]
        xn = [torch.randn(1, narrow[0].shape[1], device="cuda", dtype=torch.half) for _ in range(copies)]
        row["same_bytes_fp16_ms"] = _time(lambda i: torch.nn.functional.linear(xn[i], narrow[i]), copies)
        row["fraction_of_bytes_ratio_same_bytes_fp16"] = (row[f"{fastest[0]}_ms"] / row["same_bytes_fp16_ms"]
                                                          / row["bytes_ratio_vs_fastest_dense"])
    if pattern != "2:4":  # the same pattern in 16 bits (its decode path at one token, else its GEMM)
        w16 = [cutlass_nm.prune(w, pattern)[0] for w in dense16]
        row["ours_16bit_ms"] = _time(lambda i: cutlass_nm.matmul(x16[i], w16[i]), copies)
        row["speedup_vs_ours_16bit"] = row["ours_16bit_ms"] / row["median_ms"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=lambda s: tuple(int(v) for v in s.split(",")), default=TOKENS)
    ap.add_argument("--shapes", type=_parse_shapes, default=SHAPES, help="NxK,... (out x in features)")
    ap.add_argument("--patterns", default="2:4",
                    help="comma-separated: 2:4 and V:N:M (every --tokens), N:M (one token: the FP8 decode path)")
    ap.add_argument("--out", type=Path, help="write the result JSON here")
    args = ap.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        raise SystemExit("bench_fp8.py needs an sm_90 (Hopper) GPU")
    from cutlass_nm.bench.env import environment
    from cutlass_nm.dispatch import precompile_for

    patterns = args.patterns.split(",")
    runs = [(p, n, k, m) for p in patterns for n, k in args.shapes
            for m in (args.tokens if p == "2:4" or Pattern.parse(p).is_vnm else (1,))]
    weights = {(p, n, k): cutlass_nm.prune(torch.randn(n, k, device="cuda", dtype=torch.bfloat16), p, dtype=E4M3)[0]
               for p, n, k, _ in runs}
    sixteen = {key: cutlass_nm.prune(w.to_dense().bfloat16(), key[0])[0] for key, w in weights.items()
               if key[0] != "2:4"}
    forced = [(p, n, k, m) for p, n, k, m in runs if m > 1 and Pattern.parse(p).is_vnm]  # vnm_fp8_sm90, forced
    precompile_for([(m, weights[p, n, k], dtype, False) for p, n, k, m in runs if (p, n, k, m) not in forced
                    for dtype in ((torch.bfloat16,) if m > 1 else (torch.bfloat16, E4M3))]
                   + [(m, sixteen[p, n, k], torch.bfloat16, False) for p, n, k, m in runs if p != "2:4"])
    precompile_for([(m, weights[p, n, k], torch.bfloat16, False) for p, n, k, m in forced], family="vnm_fp8_sm90")
    rows = []
    for p, n, k, m in runs:
        row = bench_shape(m, n, k, p)
        rows.append(row)
        cslt = f"{row['speedup_vs_cusparselt_fp8']:.2f}x cuSPARSELt" if "speedup_vs_cusparselt_fp8" in row \
            else "cuSPARSELt FP8 not run"
        decode = f", {row['fraction_of_bytes_ratio']:.2f} (x e4m3) / {row['fraction_of_bytes_ratio_x16']:.2f} " \
            f"(x bf16) of the bytes ratio vs {row['fastest_dense']} (cuBLAS on the same bytes: " \
            f"{row['fraction_of_bytes_ratio_same_bytes_fp16']:.2f})" if m == 1 else ""
        if "speedup_vs_ours_16bit" in row:
            decode += f", {row['speedup_vs_ours_16bit']:.2f}x the 16-bit {p} path"
        print(f"{p} {m}x{n}x{k}: {row['speedup_vs_dense_fp8']:.2f}x dense FP8, {row['speedup_vs_fp16']:.2f}x fp16, "
              f"{cslt}, rel err {row['rel_err']:.1e}{decode}", flush=True)
    result = {"environment": environment(), "rows": rows}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

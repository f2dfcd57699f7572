"""Compile, in parallel, the nm_decode kernels that tests/test_gpu_nm_decode.py forces through its variant lists
(the heuristic ones come from precompile_gpu_tests.py), so a device call does not compile them one by one.

    python3 benchmarks/precompile_decode_tests.py
"""

from __future__ import annotations

from precompile_tests import build, test_module

from cutlass_nm.families import KernelTypes, get_family


def main() -> None:
    t = test_module("test_gpu_nm_decode")
    cfg = get_family("nm_decode").Config
    f16, f16b = KernelTypes("f16", "f16", False), KernelTypes("f16", "f16", True)
    bf16b = KernelTypes("bf16", "bf16", True)
    kids = [("nm_decode", cfg(max_tokens=1, warps=w, rows=r, stage_x=s, ahead=a, transpose=tr), f16)
            for w, r, s, a, tr in t.ONE_TOKEN_VARIANTS]
    kids += [("nm_decode", cfg(max_tokens=tk, warps=8, rows=r, transpose=tr), f16)
             for tk, _, r, tr in t.MULTI_TOKEN_VARIANTS]
    kids += [("nm_decode", cfg(max_tokens=tk, warps=w, ahead=a, mode=1), f16b) for tk, _, w, a in t.MODE1_VARIANTS]
    kids += [("nm_decode", cfg(max_tokens=tk, warps=w, ahead=a, mode=2, bulk=b), ty)
             for tk, _, w, a, b in t.MODE2_VARIANTS for ty in (f16b, bf16b)]
    kids += [("nm_decode", cfg(max_tokens=16, warps=2, ahead=4, mode=2, bulk=b), f16b) for b in (0, 1)]
    kids += [("nm_decode", cfg(max_tokens=4, warps=4, ahead=2, mode=mo, pdl=p), f16b)  # split: a launch argument
             for mo, p in {(mo, p) for mo, _, p in t.LAUNCH_VARIANTS}]
    kids += [("nm_decode", cfg(**c, pdl=1), f16) for c in t.CHAIN_CONFIGS.values()]
    kids += [("nm_decode", cfg(max_tokens=tk, warps=8, ahead=2, mode=mo, pdl=1, prefetch=p, min_ctas=c,
                               early_release=e), f16b) for mo, tk, _, p, c, e in t.STREAM_VARIANTS]
    kids += [("nm_decode", cfg(max_tokens=tk, warps=w, ahead=a, mode=3, pdl=1), ty)
             for tk, _, w, a in t.MODE3_VARIANTS for ty in (f16b, bf16b)]
    kids += [("nm_decode", cfg(max_tokens=tk, warps=8, ahead=2, mode=mo, pdl=1, split=s, prefetch=p, min_ctas=3,
                               wsplit=ws), f16b) for mo, tk, _, ws, s, p in t.WSPLIT_VARIANTS]
    kids += [("nm_decode", t.push_config(v), f16b) for v in t.PUSH_VARIANTS]
    build(kids, "decode test kernels")


if __name__ == "__main__":
    main()

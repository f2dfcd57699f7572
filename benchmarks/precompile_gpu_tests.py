"""Compile, in parallel, the kernels the GPU tests and the LLaMA block benchmark will ask for, so that a device
call spends its minutes on the GPU instead of on serial first-use compiles.

    python3 benchmarks/precompile_gpu_tests.py --families vnm_sm90 --tokens 1,2048 --dtypes f16,bf16 --f32-out
"""

from __future__ import annotations

import argparse
import time

from cutlass_nm.families import FAMILIES, KernelTypes, Problem, get_family
from cutlass_nm.kernels import precompile


def kernel_ids(families: list[str], tokens: list[int], types: list[KernelTypes]) -> list:
    """(family, heuristic config, types) for every family x token count x types (+ vnm_sm90's V = 64 twins)."""
    kids = set()
    for name in families:
        fam = get_family(name)
        for m in tokens:
            for t in types:
                p = Problem(m, 2048, 4096, t)
                cfg = fam.heuristic(p)
                kids.add((name, cfg, t))
                if name == "nm_decode":  # N:M weights with the format's default vector = 32: tensor cores
                    for n, k in ((2048, 4096), (8192, 8192)):
                        kids.add((name, fam.heuristic(Problem(m, n, k, t, "2:8", 32)), t))
                if name == "vnm_sm90":  # V = 64 weights run the tile_m = 64 twin of the heuristic config
                    from cutlass_nm.families.vnm_sm90 import fallback_config

                    kids.add((name, fallback_config(cfg, p), t))
    return sorted(kids, key=str)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default=",".join(sorted(FAMILIES)))
    ap.add_argument("--tokens", default="1,16,64,128,2048", help="token counts m whose heuristic configs to build")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--bias", choices=["both", "yes", "no"], default="both")
    ap.add_argument("--f32-out", action="store_true", help="also the f32-output variants")
    args = ap.parse_args()
    biases = {"both": (False, True), "yes": (True,), "no": (False,)}[args.bias]
    dtypes = args.dtypes.split(",")
    types = [KernelTypes(d, o, b) for d in dtypes for o in (d, "f32") if o == d or args.f32_out for b in biases]
    kids = kernel_ids(args.families.split(","), [int(t) for t in args.tokens.split(",")], types)
    t0 = time.time()
    results = precompile(kids)
    bad = [(k, r) for k, r in zip(kids, results, strict=True) if isinstance(r, Exception)]
    print(f"precompiled {len(kids)} kernels in {time.time() - t0:.0f} s, {len(bad)} failed", flush=True)
    for kid, err in bad:
        print("  failed:", kid[0], kid[1], kid[2], str(err)[:300])


if __name__ == "__main__":
    main()

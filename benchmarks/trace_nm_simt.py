"""Where nm_simt's TMA pipeline waits: the kernel built with CNM_TRACE (codegen/templates/nm_simt.cu) stamps, per CTA
and k-tile, the SM clock when warp 0 issued the tile's copies, when warp 1 began waiting for the tile and when that
wait ended, and per CTA its entry and exit. Per config this prints, over the first wave's CTAs, in SM cycles: a
tile's latency from issue to ready, how long before it was needed it was issued (lookahead), warp 1's wait for it, the
compute time of a tile, the share of warp 1's loop spent waiting, and a CTA's fixed costs (entry to its first tile
ready, last tile ready to exit, the whole CTA) with the spread of the wave's start times.

    python3 benchmarks/trace_nm_simt.py --mnk 2048x4096x4096 --pattern 4:32 \
        --configs '{"block_rows": 128, "block_tokens": 256, "thread_tokens": 16, "k_cols": 64, "stages": 3, ...}'
"""

from __future__ import annotations

import argparse
import ctypes
import json

import numpy as np
import torch

from cutlass_nm.bench.env import environment
from cutlass_nm.build import build
from cutlass_nm.families import KernelTypes
from cutlass_nm.families.nm_simt import FAMILY, Config, kgroups_for
from cutlass_nm.formats.nm import compress_nm
from cutlass_nm.patterns import Pattern

TRACE_CTAS, TRACE_TILES = 1024, 128  # the kernel's buffer: [CTA][tile][issued, wait begun, ready]
TYPES = KernelTypes("f32", "f32", False)


def pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q)) if a.size else float("nan")


def trace(cfg: Config, m: int, n: int, k: int, pattern: str) -> dict:
    """Run one traced call (after three untimed ones) and summarize the first wave's CTAs."""
    lib = ctypes.CDLL(str(build("#define CNM_TRACE 1\n" + FAMILY.source(cfg, TYPES), FAMILY.arch,
                                "nm_simt_trace").path))
    lib.cnm_trace_read.argtypes = [ctypes.c_void_p, ctypes.c_int]
    run = FAMILY.bind(lib, cfg, TYPES)
    x = torch.randn(m, k, device="cuda")
    w = compress_nm(torch.randn(n, k, device="cuda"), pattern, 32, prune=True)
    y = torch.empty(m, n, device="cuda")
    for _ in range(4):
        run(x, w, None, y)
    torch.cuda.synchronize()
    pat = Pattern.parse(pattern)
    groups = -(-k // pat.m)
    ktiles = -(-groups // kgroups_for(pat.m, cfg.k_cols))
    tiles = min(TRACE_TILES, -(-ktiles // cfg.split_k))
    grid = -(-n // cfg.block_rows) * -(-m // cfg.block_tokens) * cfg.split_k
    ctas = min(TRACE_CTAS, grid)
    buf = np.zeros((ctas, TRACE_TILES, 3), dtype=np.int64)
    assert lib.cnm_trace_read(buf.ctypes.data, ctas) == 0
    wave = buf[: min(ctas, 132), :tiles]  # one CTA per SM for the configs of interest: the first wave
    issued, begun, ready = wave[..., 0], wave[..., 1], wave[..., 2]
    latency, lookahead, wait = ready - issued, begun - issued, (ready - begun).clip(min=0)
    compute = begun[:, 1:] - ready[:, :-1]
    loop = ready[:, -1] - begun[:, 0]
    steady = slice(cfg.stages, None)
    entry, leave, g_entry = (buf[: wave.shape[0], TRACE_TILES - 1, i] for i in range(3))  # the CTA's own stamps
    out = {"config": cfg.to_record(), "m": m, "n": n, "k": k, "pattern": pattern, "tiles": tiles,
           "ctas": int(wave.shape[0]),
           "latency_first": pct(latency[:, : cfg.stages], 50), "latency_steady_p50": pct(latency[:, steady], 50),
           "latency_steady_p90": pct(latency[:, steady], 90), "lookahead_steady_p50": pct(lookahead[:, steady], 50),
           "wait_steady_p50": pct(wait[:, steady], 50), "wait_steady_p90": pct(wait[:, steady], 90),
           "compute_p50": pct(compute, 50), "wait_share": float(wait.sum() / max(1, loop.sum())),
           # where a CTA's fixed cost goes: entry to its first tile ready, last tile ready to exit (the last tile's
           # compute and the epilogue), the whole CTA; and how far apart the wave's CTAs started (global timer, µs)
           "first_ready_p50": pct(ready[:, 0] - entry, 50), "tail_p50": pct(leave - ready[:, -1], 50),
           "cta_p50": pct(leave - entry, 50), "start_spread_us": float(g_entry.max() - g_entry.min()) / 1e3}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mnk", default="2048x4096x4096")
    ap.add_argument("--pattern", default="4:32")
    ap.add_argument("--configs", required=True, help="JSON configs separated by |")
    ap.add_argument("--out")
    args = ap.parse_args()
    m, n, k = (int(v) for v in args.mnk.split("x"))
    rows = []
    for text in args.configs.split("|"):
        cfg = Config.from_record({**Config().to_record(), **json.loads(text)})
        rows.append(trace(cfg, m, n, k, args.pattern))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"environment": environment(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()

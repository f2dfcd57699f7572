"""How many gathered-x row fetches a cluster of V-blocks could share (issue 5's next design), measured on pruned
weights, on the CPU.

A CTA of vnm_sm90 computes one V-block and gathers, per group of M columns, the 4 rows of xᵀ its block keeps, in
slots 0-3 of wgmma's layout. A cluster of C consecutive V-blocks could fetch a row once and multicast it by TMA to
every CTA that keeps it, if it sits at the same slot in all of them; the order of a group's 4 kept columns is free
(the 2:4 metadata follows it). Per (cluster, group) this counts the fetches:

* ``separate``: 4 C (today);
* ``union``: distinct columns kept by the cluster (the floor of any sharing);
* ``slots``: distinct (column, slot) pairs of a greedy slot assignment (columns kept by most blocks first, each
  to the slot free in most of its blocks); for C = 2 also the exact optimum over all 24² orders.

    python3 benchmarks/vnm_slot_sharing.py --out benchmarks/results/cpu/vnm_slot_sharing.json
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch

import cutlass_nm
from cutlass_nm.bench.env import environment

KTILE_B_KB, KTILE_A_KB = 32.0, 9.0  # 128x256x64 k-tile: gathered x, and values + metadata (results/h100/NOTES.md)


def slot_fetches(sets: list[frozenset[int]]) -> int:
    """Distinct (column, slot) pairs of a greedy assignment giving each block's 4 columns distinct slots 0-3."""
    free = [set(range(4)) for _ in sets]
    count = {j: sum(j in s for s in sets) for j in set().union(*sets)}
    pairs = 0
    for j in sorted(count, key=lambda c: (-count[c], c)):
        waiting = [b for b, s in enumerate(sets) if j in s]
        while waiting:
            slot = max(range(4), key=lambda t: (sum(t in free[b] for b in waiting), -t))
            got = [b for b in waiting if slot in free[b]]
            for b in got:
                free[b].remove(slot)
            waiting = [b for b in waiting if b not in got]
            pairs += 1
    return pairs


def exact_pair_fetches(a: frozenset[int], b: frozenset[int]) -> int:
    """The optimum for two blocks: 8 minus the largest number of shared columns given equal slots (all of them:
    place the shared columns first, in the same slots of both)."""
    best = 8
    for pa in itertools.permutations(sorted(a)):
        for pb in itertools.permutations(sorted(b)):
            best = min(best, len({(c, s) for s, c in enumerate(pa)} | {(c, s) for s, c in enumerate(pb)}))
    return best


def weight(n: int, k: int, kind: str, gen: torch.Generator) -> torch.Tensor:
    """iid Gaussian, or with per-input-channel scales from a log-normal (outlier channels, as LLM activations make
    the important columns of a layer common to its rows)."""
    w = torch.randn(n, k, generator=gen)
    if kind == "channel_scaled":
        w *= torch.exp(torch.randn(1, k, generator=gen))
    return w


def measure(pattern: str, cluster: int, kind: str, n: int, k: int, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    w, _ = cutlass_nm.prune(weight(n, k, kind, gen), pattern)
    cols = w.columns  # blocks x G x 4
    blocks, groups = cols.shape[0], cols.shape[1]
    sep = union = slots = exact = 0
    for c0 in range(0, blocks - cluster + 1, cluster):
        for g in range(groups):
            sets = [frozenset(cols[c0 + i, g].tolist()) for i in range(cluster)]
            sep += 4 * cluster
            union += len(frozenset().union(*sets))
            slots += slot_fetches(sets)
            if cluster == 2:
                exact += exact_pair_fetches(*sets)
    row = {"pattern": pattern, "cluster": cluster, "weights": kind, "n": n, "k": k,
           "union_over_separate": union / sep, "slots_over_separate": slots / sep,
           "ktile_l2_kb_slots": KTILE_B_KB * slots / sep + KTILE_A_KB}
    if cluster == 2:
        row["exact_over_separate"] = exact / sep
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=2048)
    args = ap.parse_args()
    rows = []
    for pattern, cluster, kind in itertools.product(("128:2:8", "128:2:16"), (2, 4), ("iid", "channel_scaled")):
        rows.append(measure(pattern, cluster, kind, args.n, args.k, seed=3))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

"""GPU timing the way CUTLASS and Triton recommend: warm-up, inputs rotated past L2, median of many."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    p20_ms: float
    p50_ms: float
    p80_ms: float
    reps: int


def copies_to_rotate(bytes_per_set: int, l2_bytes: int = 50 << 20, factor: int = 3, cap: int = 32) -> int:
    """How many input sets make one pass over them at least ``factor`` x the L2 size."""
    return max(1, min(cap, -(-factor * l2_bytes // max(1, bytes_per_set))))


def time_rotating(fn: Callable[[int], object], copies: int, reps: int = 100, warmup_ms: float = 200.0) -> Timing:
    """Time ``fn(i % copies)`` with CUDA events around each call, after a warm-up of ``warmup_ms``."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    n = 0
    while True:  # warm up until clocks settle (and at least one pass over all copies)
        fn(n % copies)
        n += 1
        if n % copies == 0:
            end.record()
            end.synchronize()
            if start.elapsed_time(end) >= warmup_ms:
                break
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (s, e) in enumerate(events):
        s.record()
        fn(i % copies)
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in events)
    q = statistics.quantiles(times, n=5)
    return Timing(q[0], statistics.median(times), q[3], reps)

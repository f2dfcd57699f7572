"""GPU timing the way CUTLASS and Triton recommend: warm-up, inputs rotated past L2, median of many.

Each timed sample is one replay of a CUDA graph that calls the kernel once per input set, so
host launch overhead (Python, ctypes, descriptor setup) stays out of kernel comparisons; the
host overhead is measured on its own (benchmarks/bench_host.py). Where capture fails,
samples fall back to events around single eager calls, and the result says so.
"""

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
    method: str  # "graph" or "events"


def copies_to_rotate(bytes_per_set: int, l2_bytes: int = 50 << 20, factor: int = 3, cap: int = 32) -> int:
    """How many input sets make one pass over them at least ``factor`` x the L2 size."""
    return max(1, min(cap, -(-factor * l2_bytes // max(1, bytes_per_set))))


def _capture(fn: Callable[[int], object], copies: int) -> torch.cuda.CUDAGraph | None:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.stream(stream):
            for i in range(copies):  # warm the allocator on this stream first
                fn(i)
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph, stream=stream):
            for i in range(copies):
                fn(i)
    except RuntimeError:
        torch.cuda.synchronize()
        return None
    return graph


def _samples(step: Callable[[], object], reps: int, warmup_ms: float) -> list[float]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    while True:  # warm up until clocks settle
        step()
        end.record()
        end.synchronize()
        if start.elapsed_time(end) >= warmup_ms:
            break
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in events:
        s.record()
        step()
        e.record()
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) for s, e in events)


def time_rotating(fn: Callable[[int], object], copies: int, reps: int = 100, warmup_ms: float = 200.0) -> Timing:
    """Per-call time of ``fn(i)`` over rotating input sets ``i < copies``: median, p20, p80 in ms."""
    graph = _capture(fn, copies)
    if graph is not None:
        times = [t / copies for t in _samples(graph.replay, reps, warmup_ms)]
        method = "graph"
    else:
        counter = iter(range(1 << 62))
        times = _samples(lambda: fn(next(counter) % copies), reps, warmup_ms)
        method = "events"
    q = statistics.quantiles(times, n=5)
    return Timing(q[0], statistics.median(times), q[3], reps, method)


def profile_calls(fn: Callable[[], object], calls: int = 5, warmup: int = 1):
    """torch.profiler's record (CUDA activity) of ``calls`` calls of ``fn()`` after ``warmup`` untimed ones."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return prof


def kernel_breakdown(fn: Callable[[], object], calls: int = 5) -> list[dict]:
    """GPU kernels of ``fn()`` from torch.profiler (after one warm-up call): name, launches per call and mean device
    µs per call, largest first."""
    prof = profile_calls(fn, calls)
    rows = [{"kernel": e.key[:120], "launches": e.count // calls, "us": e.device_time_total / calls}
            for e in prof.key_averages() if e.device_time_total > 0 and e.key not in ("cudaDeviceSynchronize",)]
    return sorted(rows, key=lambda r: -r["us"])

"""Random GPU problems and their fp64 references, shared by the GPU test modules."""

from __future__ import annotations

import torch

from cutlass_nm.formats import AnyWeight, compress_as
from cutlass_nm.patterns import Pattern


def pruned(dense: torch.Tensor, pattern: str, vector: int = 32) -> AnyWeight:
    """``dense`` magnitude-pruned and compressed in ``pattern``'s format: what ``cutlass_nm.prune`` returns, but
    also for patterns it refuses because some m has no family (V = 32: the decode families run it at m <= 16), so
    that each family's own refusals stay tested."""
    return compress_as(dense, Pattern.parse(pattern), prune=True, vector=vector)


def case(m: int, n: int, k: int, pattern: str, dtype: torch.dtype, seed: int, with_bias: bool):
    """x (m x k), a weight pruned to ``pattern`` (n x k), an optional bias, and x·Wᵀ + bias in fp64."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    w = pruned(torch.randn(n, k, device="cuda", dtype=dtype, generator=g), pattern)
    bias = torch.randn(n, device="cuda", dtype=dtype, generator=g) if with_bias else None
    ref = x.double() @ w.to_dense().double().T
    if bias is not None:
        ref += bias.double()
    return x, w, bias, ref


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    """‖y − ref‖ / ‖ref‖ in fp64."""
    return ((y.double() - ref).norm() / ref.norm()).item()


def repeats_on_two_streams_and_a_graph(call, xs: list[torch.Tensor], check) -> None:
    """``call(x) -> y`` (a call remembered on its first runs) checked by ``check(y, x)``: issued on two side streams at
    once (xs[2] and xs[3]), three times each; then captured in a CUDA graph on a copy of xs[0], replayed into a
    NaN-poisoned output between eager calls on xs[1:], which must not change what the graph replays."""
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    ys = []
    for _ in range(3):
        for stream, x in zip(streams, xs[2:4], strict=True):
            with torch.cuda.stream(stream):
                ys.append((call(x), x))
    torch.cuda.synchronize()
    for y, x in ys:
        check(y, x)
    static_x = xs[0].clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = call(static_x)
    for x in xs[1:]:
        eager = call(x)
        static_y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(static_y, static_x)
        check(eager, x)

"""The bound every family is judged against (the benchmarks' "% of ideal").

The nonzero multiply-adds at the engine's dense rate (so 2:4 runs at twice the dense rate in dense-equivalent
flops, V:N:M at 2/M density likewise on Sparse Tensor Cores), or the bytes moved at copy bandwidth, whichever is
larger. Rates are the planning GPU's (``arch.HOPPER``: measured H100 ceilings).
"""

from __future__ import annotations

from ..arch import HOPPER

BANDWIDTH = HOPPER.bandwidth
RATES = {"tensor": HOPPER.dense_flops, "simt": HOPPER.simt_flops}


def traffic_bytes(m: int, n: int, k: int, weight_bytes: float, elem_bytes: int = 2, out_bytes: int = 2) -> float:
    """Bytes a y = x·Wᵀ must move at least: x, W as stored (values + indices), y."""
    return m * k * elem_bytes + weight_bytes + m * n * out_bytes


def ideal_ms(m: int, n: int, k: int, density: float, weight_bytes: float, engine: str = "tensor",
             elem_bytes: int = 2, out_bytes: int = 2) -> float:
    """Roofline time in ms: max(2·m·n·k·density flops at ``RATES[engine]``, traffic at ``BANDWIDTH``)."""
    flops = 2.0 * m * n * k * density
    return max(flops / RATES[engine], traffic_bytes(m, n, k, weight_bytes, elem_bytes, out_bytes) / BANDWIDTH) * 1e3

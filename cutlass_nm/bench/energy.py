"""Energy per kernel call from NVML's total-energy counter (millijoules since driver load).

The counter is coarse (it advances in steps of tens of ms of samples), so one reading spans a loop of
graph replays of at least ``min_ms`` of kernel time. Clocks and power limits are only read, never set.
``pynvml`` (nvidia-ml-py) is optional: without it :func:`open_meter` returns None and callers skip energy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Energy:
    joules_per_call: float
    avg_power_w: float
    sm_clock_mhz: float
    window_ms: float
    calls: int


class EnergyMeter:
    """Reads one GPU's energy counter and SM clock through an NVML module (``pynvml`` or a test fake)."""

    def __init__(self, nvml: Any, index: int = 0) -> None:
        self.nvml = nvml
        nvml.nvmlInit()
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def millijoules(self) -> int:
        return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def sm_clock_mhz(self) -> float:
        return float(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))

    def measure(self, step: Callable[[], object], calls_per_step: int, sync: Callable[[], object],
                min_ms: float = 200.0, max_steps: int = 1 << 20, clock: Callable[[], float] = time.perf_counter
                ) -> Energy:
        """Run ``step`` (``calls_per_step`` kernel calls) until ``min_ms`` have passed; joules per call, average
        watts over the window, and the SM clock sampled in its middle."""
        sync()
        e0, t0 = self.millijoules(), clock()
        steps, clocks = 0, []
        while steps < max_steps:
            step()
            steps += 1
            if steps & (steps - 1) == 0:  # sync at powers of two: few host stalls, bounded overshoot
                sync()
                elapsed = (clock() - t0) * 1e3
                clocks.append(self.sm_clock_mhz())
                if elapsed >= min_ms:
                    break
        sync()
        e1, t1 = self.millijoules(), clock()
        window_ms = (t1 - t0) * 1e3
        joules = max(0, e1 - e0) / 1e3
        calls = steps * calls_per_step
        sm = sorted(clocks)[len(clocks) // 2] if clocks else self.sm_clock_mhz()
        return Energy(joules / calls, joules / (window_ms / 1e3) if window_ms > 0 else 0.0, sm, window_ms, calls)


def open_meter(index: int = 0) -> EnergyMeter | None:
    """An NVML meter for GPU ``index``, or None where pynvml or the energy counter is unavailable."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        meter = EnergyMeter(pynvml, index)
        meter.millijoules()
        return meter
    except Exception:  # NVML present but no energy counter (older GPUs, some VMs)
        return None


def energy_rotating(fn: Callable[[int], object], copies: int, meter: EnergyMeter, min_ms: float = 200.0) -> Energy:
    """Energy per call of ``fn(i)`` over rotating inputs (the same CUDA-graph replay :mod:`.timing` times)."""
    import torch

    from ..timing import _capture

    graph = _capture(fn, copies)
    if graph is not None:
        return meter.measure(graph.replay, copies, torch.cuda.synchronize, min_ms)
    counter = iter(range(1 << 62))
    return meter.measure(lambda: fn(next(counter) % copies), 1, torch.cuda.synchronize, min_ms)

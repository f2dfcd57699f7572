"""Measurement in a worker process: a config that faults or hangs fails its trial, not the tuner.

The parent sends (family, config record, types, shape, reps); the worker builds inputs once per
problem, checks the kernel against an fp64 reference on its first run, then times it (CUDA-graph
replays over inputs rotated past L2) and, when asked and NVML is there, reads the energy counter around
a loop of the same replays (joules per call, average watts, SM clock). A dead or silent worker is replaced.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import traceback
from typing import Any

TOLERANCE = {"f16": 2e-3, "bf16": 1e-2, "f32": 1e-5, "e4m3": 1e-2}  # e4m3: bf16 output


def _serve(conn) -> None:  # runs in the worker process
    import torch

    from cutlass_nm.bench.energy import energy_rotating, open_meter
    from cutlass_nm.bench.run import make_weight
    from cutlass_nm.families import KernelTypes, get_family
    from cutlass_nm.families.launch import torch_dtype
    from cutlass_nm.formats.fp8 import dequantize_rows, quantize, quantize_rows
    from cutlass_nm.kernels import get_kernel
    from cutlass_nm.patterns import Pattern
    from cutlass_nm.routing import weight_kind
    from cutlass_nm.timing import copies_to_rotate, time_rotating

    cache: dict = {}
    meter: list = []  # opened on the first request for energy
    while True:
        msg = conn.recv()
        if msg is None:
            return
        family, record, types, (m, n, k), reps, *rest = msg
        energy_ms = rest[0] if rest else 0.0
        pattern = rest[1] if len(rest) > 1 else "2:4"
        try:
            types = KernelTypes(*types)
            cfg = get_family(family).Config.from_record(record)
            shape_key = (m, n, k, types, pattern, family)
            if shape_key not in cache:
                cache.clear()
                fam = get_family(family)  # a family with its own output (vnm_glu_sm90: h transposed) says so
                fp8 = types.dtype == "e4m3"  # drawn in bf16, then quantized (x per token, W per channel)
                fp8_weight = fp8 or getattr(fam.weight, "fp8", False)  # an FP8 family also takes a 16-bit x
                dt = torch.bfloat16 if fp8 else torch_dtype(types.dtype)
                copies = copies_to_rotate((m * k + n * k) * 2)
                g = torch.Generator(device="cuda").manual_seed(1234)
                xs = [torch.randn(m, k, device="cuda", dtype=dt, generator=g) for _ in range(copies)]
                kind = weight_kind(fam.weight) or "24"  # the pattern, in the family's weight format
                if kind == "nm" and Pattern.parse(pattern).is_vnm:  # a family that also runs V:N:M (read as 2:M)
                    kind = "vnm"
                ws = [make_weight(torch.randn(n, k, device="cuda", dtype=dt, generator=g), pattern, kind)
                      for _ in range(copies)]
                extra: list[tuple] = [() for _ in range(copies)]  # the launcher's arguments after y
                if fp8:
                    quantized = [quantize_rows(x) for x in xs]
                    xs, extra = [q for q, _ in quantized], [(s,) for _, s in quantized]
                if fp8_weight:
                    ws = [quantize(w) for w in ws]
                ref = fam.reference(dequantize_rows(xs[0], extra[0][0]) if fp8 else xs[0], ws[0])
                shape = fam.output_shape(m, n)
                ys = [torch.empty(shape, device="cuda", dtype=torch_dtype(types.out_dtype)) for _ in range(copies)]
                cache[shape_key] = (xs, ws, ref, ys, copies, extra)
            xs, ws, ref, ys, copies, extra = cache[shape_key]
            kern = get_kernel((family, cfg, types))
            ys[0].fill_(float("nan"))
            kern(xs[0], ws[0], None, ys[0], *extra[0])
            torch.cuda.synchronize()
            err = ((ys[0].double() - ref).norm() / ref.norm()).item()
            if not err < TOLERANCE[types.dtype]:
                conn.send({"status": "runtime_error", "error": f"wrong result: rel. error {err:.2e}"})
                continue
            def run(i, kern=kern, xs=xs, ws=ws, ys=ys, extra=extra):
                return kern(xs[i], ws[i], None, ys[i], *extra[i])

            t = time_rotating(run, copies, reps=reps, warmup_ms=50.0)
            res = {"status": "ok", "p20_ms": t.p20_ms, "p50_ms": t.p50_ms, "p80_ms": t.p80_ms,
                   "iterations": reps, "rel_err": err}
            if energy_ms > 0:
                if not meter:
                    meter.append(open_meter(torch.cuda.current_device()))
                if meter[0] is not None:
                    e = energy_rotating(run, copies, meter[0], energy_ms)
                    res.update(joules=e.joules_per_call, avg_power_w=e.avg_power_w, sm_clock_mhz=e.sm_clock_mhz,
                               energy_window_ms=e.window_ms)
            conn.send(res)
        except Exception as exc:  # reported to the parent as this trial's failure
            conn.send({"status": "runtime_error", "error": f"{exc.__class__.__name__}: {exc}"[:500],
                       "trace": traceback.format_exc()[-2000:]})


class MeasureWorker:
    """The parent's handle on one GPU worker process; ``measure`` never raises for kernel faults."""

    def __init__(self, timeout_s: float = 120.0) -> None:
        self.timeout_s = timeout_s
        self._ctx = mp.get_context("spawn")
        self._proc = None
        self._conn = None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child,), daemon=True)
        self._proc.start()
        self._conn = parent

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        self._proc = self._conn = None

    def measure(self, family: str, cfg: Any, types: Any, shape: tuple[int, int, int], reps: int = 50,
                energy_ms: float = 0.0, pattern: str = "2:4") -> dict:
        """Time ``cfg`` on ``shape`` with a random ``pattern`` weight; with ``energy_ms`` > 0 also its energy
        over a loop that long."""
        if self._proc is None or not self._proc.is_alive():
            self._start()
        msg = (family, cfg.to_record(), (types.dtype, types.out_dtype, types.bias), shape, reps, energy_ms, pattern)
        try:
            self._conn.send(msg)
            if not self._conn.poll(self.timeout_s):
                self._kill()
                return {"status": "timeout", "error": f"no answer in {self.timeout_s:.0f} s"}
            result = self._conn.recv()
            if result["status"] != "ok" and "CUDA" in result.get("error", ""):
                self._kill()  # a fault leaves the worker's CUDA context unusable: start afresh next time
            return result
        except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
            code = self._proc.exitcode if self._proc is not None else None
            self._kill()
            return {"status": "runtime_error", "error": f"worker died ({exc.__class__.__name__}, exit {code})"}

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self._conn.send(None)
        if self._proc is not None:
            self._proc.join(10)
        self._kill()

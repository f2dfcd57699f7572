"""cuSPARSELt 2:4 timings, each shape in a child process (some of its paths fault and poison the context).

    python -m cutlass_nm.bench.cusparselt f16 50 cusparselt_search <deadline> M,N,K ...   (the child)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from .cases import CSLT_MODE

CSLT_MIN_M = 16  # cuSPARSELt refuses a dense operand of fewer columns ("operation not supported")


def _cslt_child(argv: list[str]) -> None:
    """Child process: time cuSPARSELt for each M,N,K in turn, one JSON line each; exit after a failure
    (a CUDA error poisons the context), and the parent starts a new child for the rest. Below
    ``CSLT_MIN_M`` tokens it times x padded to that many rows (what a caller would have to do), and says so;
    past the deadline (epoch seconds) it reports shapes as skipped."""
    import contextlib
    import io

    from .baselines import _child

    dtype, reps, mode, deadline, *todo = argv
    for text in todo:
        m, n, k = (int(v) for v in text.split(","))
        if time.time() > float(deadline):
            print(json.dumps({"error": "skipped: --budget-s reached"}), flush=True)
            continue
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                _child(max(m, CSLT_MIN_M), n, k, dtype, int(reps), mode)
        except Exception as exc:
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}), flush=True)
            sys.exit(3)
        res = json.loads([ln for ln in buf.getvalue().splitlines() if ln.startswith("{")][-1])
        if m < CSLT_MIN_M:
            res["padded_m"] = CSLT_MIN_M
        print(json.dumps(res), flush=True)


def cusparselt_rows(mnks: list[tuple[int, int, int]], dtype: str, reps: int, mode: str = CSLT_MODE,
                    timeout_s: float = 900.0, deadline: float = float("inf")) -> dict[tuple[int, int, int], dict]:
    """cuSPARSELt timings per (m, n, k), from as few child processes as the faults allow."""
    out: dict[tuple[int, int, int], dict] = {}
    todo = list(mnks)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    while todo:
        cmd = [sys.executable, "-m", "cutlass_nm.bench.cusparselt", dtype, str(reps), mode,
               str(min(deadline, 1e12)), *(",".join(map(str, s)) for s in todo)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
            stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            stdout, stderr, rc = exc.stdout or "", "timed out", -1
            stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
        lines = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")]
        for s, res in zip(todo, lines, strict=False):
            out[s] = res
        done = len(lines)
        said_why = bool(lines) and "error" in lines[-1]  # a Python error: reported, then the child exits
        if done < len(todo) and rc != 0 and not said_why:  # died without a word on todo[done]
            tail = (stderr.strip().splitlines() or [f"exit status {rc}"])[-1]
            out[todo[done]] = {"error": f"cuSPARSELt child died: {tail}"[:300]}
            done += 1
        elif done < len(todo) and not said_why:
            out.update({s: {"error": "cuSPARSELt child printed no result"} for s in todo[done:]})
            done = len(todo)
        todo = todo[done:]
    return out



if __name__ == "__main__":
    _cslt_child(sys.argv[1:])

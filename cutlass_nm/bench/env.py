"""The environment header every benchmark result carries."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from importlib import metadata

import torch


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment() -> dict:
    gpu = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else None
    nvcc = _run(["nvcc", "--version"]).splitlines()
    return {
        "gpu": gpu.name if gpu else None,
        "sm_count": gpu.multi_processor_count if gpu else None,
        "compute_capability": f"{gpu.major}.{gpu.minor}" if gpu else None,
        "driver": _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]) or None,
        "nvcc": nvcc[-1] if nvcc else None,
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cutlass": metadata.version("nvidia-cutlass"),
        "python": platform.python_version(),
        "commit": os.environ.get("CUTLASS_NM_COMMIT") or _run(["git", "rev-parse", "--short", "HEAD"]) or None,
        "command": " ".join(sys.argv),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }

"""compute-sanitizer over one small problem of each family: memcheck for all, racecheck where shared memory is
filled by producer warps (TMA / bulk copies / gathered cp.async). Each case first runs plainly (compile, check)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
CASE = Path(__file__).with_name("sanitize_case.py")
FAMILIES = ["sptc24_sm90", "sptc24_sm80", "vnm_sm90", "vnm_sm80", "vnm_glu_sm90", "nm_simt", "nm_decode",
            "nm_decode_simt"]
RACECHECK = {"vnm_sm90", "vnm_glu_sm90", "nm_simt", "nm_decode"}


def _sanitizer() -> str:
    found = shutil.which("compute-sanitizer")
    if found is None:
        pytest.skip("compute-sanitizer is not on PATH (it ships with the CUDA toolkit)")
    return found


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
@pytest.mark.parametrize("family", FAMILIES)
def test_sanitizer_finds_no_errors(family: str, tool: str) -> None:
    if tool == "racecheck" and family not in RACECHECK:
        pytest.skip(f"{family} fills shared memory with its computing threads only")
    if torch.cuda.get_device_capability() != (9, 0) and family.endswith("sm90"):
        pytest.skip("an sm_90a family")
    sanitizer = _sanitizer()
    plain = _run([sys.executable, str(CASE), family], 900)  # compiles on first use
    assert plain.returncode == 0, plain.stdout + plain.stderr[-2000:]
    res = _run([sanitizer, "--tool", tool, "--error-exitcode", "3", sys.executable, str(CASE), family], 900)
    summary = re.findall(r"ERROR SUMMARY: (\d+) error", res.stdout + res.stderr)
    assert res.returncode == 0 and summary and summary[-1] == "0", (res.stdout + res.stderr)[-3000:]

"""Registers and static shared memory per kernel of a compiled library (``cuobjdump --dump-resource-usage``),
the same figures ``-Xptxas -v`` prints, read from the .so after the build so no build flag changes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

_LINE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)")


def parse_resource_usage(text: str) -> dict[str, int]:
    """The heaviest kernel's {"regs", "stack", "static_smem"} (0s when nothing is listed)."""
    best = {"regs": 0, "stack": 0, "static_smem": 0}
    for m in _LINE.finditer(text):
        regs, stack, smem = map(int, m.groups())
        if regs > best["regs"]:
            best = {"regs": regs, "stack": stack, "static_smem": smem}
    return best


def resource_usage(library: Path) -> dict[str, int]:
    """Resource usage of ``library``'s kernels; zeros when cuobjdump is missing or fails."""
    try:
        out = subprocess.run(["cuobjdump", "--dump-resource-usage", str(library)], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    return parse_resource_usage(out)

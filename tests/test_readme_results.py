"""The README's result tables are generated from the committed JSON, never typed by hand."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_tables_match_results():
    proc = subprocess.run([sys.executable, "update_readme.py", "--check"], cwd=ROOT / "benchmarks")
    assert proc.returncode == 0, "README.md is out of date: run python3 benchmarks/update_readme.py"

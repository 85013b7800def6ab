"""Run a script of `benchmarks/` the way a user would and return its last output line, the result JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_benchmark(script: str, *args: str, timeout: int = 600) -> dict:
    """`python benchmarks/<script> <args>` from the repository root; fails the test on a non-zero exit."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])

"""scripts/gpu_checks.sh, the one-call GPU check, runs end to end; on CPU its steps say why they skip or fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU behaviour; on a GPU run the script itself")
def test_gpu_checks_script_logs_every_step_and_fails_without_cuda(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path)}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_checks.sh")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]  # the benchmark needs CUDA
    assert "no CUDA device" in (tmp_path / "env.txt").read_text()
    tests_log = (tmp_path / "gpu_tests.log").read_text()
    assert " skipped" in tests_log and "failed" not in tests_log  # every gpu test collected, skipped with a reason
    assert "--gpu needs a CUDA device" in (tmp_path / "moe_layer_gpu.log").read_text()
    assert "== gpu_tests: exit 0" in proc.stdout and "== moe_layer_gpu: exit 1" in proc.stdout

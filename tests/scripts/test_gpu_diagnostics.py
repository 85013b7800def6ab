"""The GPU diagnosis scripts under scripts/gpu/ keep running between GPU sessions (on CPU here)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> dict:
    env = {**os.environ, "MOELAB_GPU_SCRIPT_DEVICE": "cpu", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_raw_grouped_mm_probe_reports_empty_expert_gradients_and_a_training_run():
    out = _run("scripts/gpu/raw_grouped_mm_probe.py")
    assert out["raw_empty_group_wgrad"] == [{"empty_nonfinite": 0, "empty_nonzero": 0}] * 3  # CPU kernel writes zeros
    run = out["tiny_bf16_without_zeroing"]
    assert run["first_nonfinite_grads"] is None and all(math.isfinite(v) for v in run["losses"])


def test_nan_hunt_trains_with_a_pinned_attention_backend_and_names_nothing_when_finite():
    out = _run("scripts/gpu/nan_hunt.py", "loop", "alone", "math")
    assert (out["dispatch"], out["order"], out["sdpa"]) == ("loop", "alone", "math")
    assert out["bf16"]["first_bad"] is None and out["bf16"]["losses"][-1] < out["bf16"]["losses"][0]

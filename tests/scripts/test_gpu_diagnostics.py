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


def test_trainer_run_summary_reads_step_rows_and_compares_peak_memory_with_the_plan(tmp_path):
    sys.path.insert(0, str(REPO / "scripts" / "gpu"))
    try:
        from trainer_run import overrides, summarize_run
    finally:
        sys.path.pop(0)
    rows = [{"step": 0, "loss": 9.0, "tokens_per_s": 10.0, "tokens": 100, "memory_gib": 2.0, "mfu": 0.1,
             "router/maxvio": 0.5},
            {"step": 0, "eval/loss": 9.1},  # an evaluation row: not a step
            {"step": 1, "loss": 8.0, "tokens_per_s": 30.0, "tokens": 200, "memory_gib": 3.0, "mfu": 0.3,
             "router/maxvio": 0.4},
            {"step": 2, "loss": 7.0, "tokens_per_s": 50.0, "tokens": 300, "memory_gib": 2.5, "mfu": 0.5,
             "router/maxvio": 0.2}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = summarize_run(path, plan_gib=6.0, config="c.yaml", extra=[])
    assert (out["steps"], out["loss_first"], out["loss_last"], out["tokens_per_step"]) == (3, 9.0, 7.0, 100)
    assert out["tokens_per_s"] == 40.0 and out["mfu"] == 0.4  # medians of the steps after the first
    assert out["peak_memory_gib"] == 3.0 and out["peak_over_plan"] == 0.5 and out["router_maxvio_last"] == 0.2
    assert "train.steps=6" in overrides(6, 2, "/x", cuda=True) and "train.device=cpu" in overrides(6, 2, "/x", cuda=False)

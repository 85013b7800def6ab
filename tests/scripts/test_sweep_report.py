"""scripts/sweep_report.py rebuilds a sweep's table and plot from the trial results alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_report_is_rebuilt_from_trial_files(tmp_path):
    trials = tmp_path / "sweep" / "trials"
    trials.mkdir(parents=True)
    for lr, loss in ((0.01, 4.0), (0.02, 3.5), (0.04, 3.8)):
        for seed in (0, 1):
            row = {"key": f"{lr}-{seed}", "width": 32, "mup": True, "lr": lr, "tokens": 100, "steps": 2,
                   "loss": loss + 0.1 * seed, "train_loss": loss, "eval_loss": loss, "diverged": False, "seed": seed}
            (trials / f"{lr}-{seed}.json").write_text(json.dumps(row))
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "sweep_report.py"), str(tmp_path / "sweep"), str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = (out / "sweep.md").read_text()
    assert "| 100 | muP | 32 | 2 | 4.0500 | **3.5500** | 3.8500 |" in table
    assert (out / "sweep.png").stat().st_size > 5_000


def test_a_folder_without_trials_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "sweep_report.py"), str(tmp_path), str(tmp_path / "o")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode != 0 and "no trial results" in proc.stderr

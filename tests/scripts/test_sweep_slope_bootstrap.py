"""scripts/sweep_slope_bootstrap.py: the width sweep's slope, and how much of it seed noise explains."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _write_sweep(trials: Path, optimum_of_width, noise_of_seed) -> None:
    """Losses a parabola in ln lr around each width's optimum, shifted by a per-seed tilt."""
    trials.mkdir(parents=True)
    for width in (32, 64, 128):
        for lr in (0.005, 0.01, 0.02, 0.04, 0.08):
            for seed in range(3):
                x = math.log(lr / optimum_of_width(width)) + noise_of_seed(width, seed)
                row = {"key": f"{width}-{lr}-{seed}", "width": width, "mup": True, "lr": lr, "tokens": 100,
                       "steps": 2, "loss": 3.0 + 0.2 * x * x, "train_loss": 3.0, "eval_loss": 3.0,
                       "diverged": False, "seed": seed}
                (trials / f"{width}-{lr}-{seed}.json").write_text(json.dumps(row))


def _run(sweep: Path) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "sweep_slope_bootstrap.py"), str(sweep),
                           "--resamples", "60"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_transferring_lr_has_slope_zero_and_no_spread(tmp_path):
    _write_sweep(tmp_path / "flat" / "trials", lambda w: 0.02, lambda w, s: 0.0)
    out = _run(tmp_path / "flat")
    assert abs(out["slope"]) < 1e-6 and out["sd"] < 1e-6 and out["widths"] == [32, 64, 128]


def test_a_drifting_lr_is_found_and_seed_noise_widens_the_interval(tmp_path):
    _write_sweep(tmp_path / "drift" / "trials", lambda w: 0.02 * (w / 32) ** -0.5, lambda w, s: 0.0)
    assert abs(_run(tmp_path / "drift")["slope"] + 0.5) < 0.05
    _write_sweep(tmp_path / "noisy" / "trials", lambda w: 0.02, lambda w, s: 0.3 * (s - 1) * (1 if w == 64 else -1))
    noisy = _run(tmp_path / "noisy")
    assert abs(noisy["slope"]) < 1e-6  # the seeds' tilts cancel in the means ...
    assert noisy["sd"] > 0.01 and noisy["lo"] < noisy["hi"]  # ... but not in every resample

"""The CPU example end to end through the CLI: coordinate check, width sweep, token-horizon law.

Small on purpose (2-layer proxies of widths 32 and 64, budgets of 12-48 steps): a few minutes on
two idle cores. The bigger example whose output docs/hparam.md records uses the same commands.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moelab.cli import app

ROOT = Path(__file__).resolve().parents[4]
SMALL = ["model.n_layers=2", "train.seq_len=64", "model.max_seq_len=64", "train.micro_batch_size=8", "train.grad_accum=1",
         "train.eval_batches=4", "train.eval_every=100000", "tracker.mode=disabled", "train.device=cpu",
         "optim.warmup_steps=20", "train.steps=200"]
LRS = "1e-2,3e-2,1e-1,3e-1,1"


def _invoke(args: list[str]) -> str:
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.slow
def test_cpu_example_produces_coord_plot_sweep_table_and_fitted_law(tmp_path, ray_local):
    recipe = str(ROOT / "configs" / "tiny.yaml")
    out = tmp_path / "hparam"

    _invoke(["mup", "check", recipe, *SMALL, "--widths", "32,128", "--steps", "2", "--seeds", "1",
             "--optimizers", "adamw", "--pydoc-corpus", "--out", str(out / "coord")])
    assert (out / "coord" / "coord_check.png").stat().st_size > 10_000
    assert "hidden matrices" in (out / "coord" / "coord_check.md").read_text()
    records = json.loads((out / "coord" / "coord_check.json").read_text())
    assert {r["optimizer"] for r in records} == {"adamw"} and any(r["metric"].startswith("dWx/") for r in records)

    sweep = _invoke(["sweep", "lr", recipe, *SMALL, "--widths", "32,64", "--lrs", LRS, "--tokens", "6144",
                     "--pydoc-corpus", "--out", str(out / "proxies")])
    assert "| muP | 32 |" in sweep and "| SP | 64 |" in sweep and "slope d ln lr*/d ln width" in sweep
    assert (out / "proxies" / "sweep.png").is_file()

    law = _invoke(["lr-predict", recipe, *SMALL, "--width", "32",
                   "--tokens", "6144,12288,24576", "--lrs", LRS, "--target", "1e9", "--pydoc-corpus",
                   "--out", str(out / "proxies")])
    assert "R² =" in law and "predicted lr* at 1,000,000,000 tokens" in law
    # the 6144-token budget at width 32 (muP) reused the sweep's 5 trials: 20 + 15 − 5 result files
    assert len(list((out / "proxies" / "trials").glob("*.json"))) == 30
    fit = json.loads((out / "proxies" / "law.json").read_text())
    assert fit["n"] >= 2 and 0.0 <= fit["r2"] <= 1.0 and math.isfinite(fit["b"])
    assert fit["interval"][0] <= fit["predicted_lr"] <= fit["interval"][1] or fit["n"] == 2
    assert (out / "proxies" / "lr_law.png").is_file()

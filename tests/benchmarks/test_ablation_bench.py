"""The sanity ablation's quick mode: clean prose beats the same prose with 30% planted garbage on BPB."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_sanity_ablation_finds_the_clean_arm_better_on_bpb(tmp_path, capsys):
    from benchmarks.ablation import main

    code = main(["--quick", "--work", str(tmp_path)])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(result) >= {"bpb_gap", "bpb_ci_low", "task_gap", "task_ci_low", "seconds"}
    assert code == 0 and result["passed"]
    assert result["bpb_gap"] > 0 and result["bpb_ci_low"] > 0
    assert "bpb/prose" in result["separating_metrics"]

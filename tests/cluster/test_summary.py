"""The pipeline summary carries the scorer's held-out agreement and the FLOPs its early exit saved."""

from __future__ import annotations

from cluster.pipeline import summarize
from cluster.stages import StageResult
from moelab.commands.demo import print_summary


def test_summary_reports_scorer_agreement_and_flops_saved(capsys):
    calibrate = {"rubrics": {"general": {"spearman_quality": {"judge": 0.81, "probe": 0.7}},
                             "code": {"spearman_quality": {"judge": 0.9, "probe": 0.8}}},
                 "compute": {"flops_saved": 0.23}}
    score = {"keep_rate": 0.4, "judge_passes_skipped": 0.3, "read_fraction_mean": 0.6}
    train = {"loss": 6.0, "eval/loss": 6.1, "tokens_per_s": 1000.0, "mfu": 0.01, "steps": 10}
    results = {n: StageResult(n, "k", rep, 1.0, False) for n, rep in
               (("calibrate", calibrate), ("score", score), ("train", train))}
    summary = summarize(results)
    assert summary["scorer"]["held_out_spearman"] == {"general": 0.81, "code": 0.9}
    assert summary["scorer"]["flops_saved"] == 0.23
    print_summary(summary, "http://127.0.0.1:1")
    out = capsys.readouterr().out
    assert "general 0.81, code 0.90" in out and "saved 23% of backbone FLOPs" in out

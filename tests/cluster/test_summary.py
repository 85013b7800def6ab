"""The pipeline summary carries both scorer heads' held-out agreement and the FLOPs its early exit saved."""

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
    assert summary["scorer"]["held_out_spearman"] == {"general": {"probe": 0.7, "judge": 0.81},
                                                      "code": {"probe": 0.8, "judge": 0.9}}
    assert summary["scorer"]["flops_saved"] == 0.23
    print_summary(summary, "http://127.0.0.1:1")
    out = capsys.readouterr().out
    assert "general Probe 0.70 / Judge 0.81, code Probe 0.80 / Judge 0.90" in out
    assert "saved 23% of backbone FLOPs" in out


def test_summary_prints_the_probe_where_it_beats_the_judge(capsys):
    """The Probe can agree with the oracle better than the Judge; printing only the Judge hid that."""
    calibrate = {"rubrics": {"general": {"spearman_quality": {"judge": 0.514, "probe": 0.527}}}}
    score = {"keep_rate": 0.4}
    train = {"loss": 6.0, "eval/loss": 6.1, "tokens_per_s": 1000.0, "mfu": 0.01, "steps": 10}
    results = {n: StageResult(n, "k", rep, 1.0, False) for n, rep in
               (("calibrate", calibrate), ("score", score), ("train", train))}
    summary = summarize(results)
    print_summary(summary, "http://127.0.0.1:1")
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("scorer:"))
    assert "Probe 0.53" in line and "Judge 0.51" in line

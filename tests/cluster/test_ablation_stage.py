"""The ablation as the pipeline's optional last stage: present only when asked, skipped on a rerun."""

from __future__ import annotations

from pathlib import Path

import pytest

import cluster.ablation as ablation_pkg
from cluster.pipeline import build_stages, layout, summarize
from cluster.stages import StageResult, StageRunner
from tests.cluster.test_pipeline import _config


def _with_ablation(tmp: Path, *extra: str):
    kept = tmp / "runs" / "pipeline" / "demo" / "kept" / "train" / "*.parquet"
    held = tmp / "held.jsonl"
    held.write_text('{"text": "a held-out document"}\n')
    raw = tmp / "raw.jsonl"
    if not raw.exists():
        raw.write_text('{"text": "a raw document"}\n')
    return layout(_config(tmp, "ablation.pipeline_stage=true", "ablation.baseline=raw",
                          f"ablation.eval_documents=[{held}]", f"ablation.out_dir={tmp / 'abl'}",
                          f"ablation.arms=[{{name: raw, documents: [{raw}]}}, "
                          f"{{name: curated, documents: ['{kept}']}}]", *extra))


def _runner(tmp: Path, cfg) -> tuple[StageRunner, list]:
    """A runner whose data stages count as finished (their keys computed as the pipeline would)."""
    stages = build_stages(cfg)
    runner = StageRunner(Path(cfg.train.out_dir).parent)
    for stage in stages[:-1]:
        runner.results[stage.name] = StageResult(stage.name, runner.key_of(stage), {}, 0.0, skipped=True)
    return runner, stages


FAKE_REPORT = {"verdicts": ["curated vs raw on eval/loss: no difference detectable"], "failed_runs": 0,
               "files": {"json": "r.json"}, "budget_tokens": 512, "ablation_run": "abc",
               "comparisons": {"curated": {"eval/loss": {"mean": -0.1, "ci_low": -0.2, "ci_high": 0.0, "sd": 1.0,
                                                         "differences": [-0.1, -0.1], "excludes_zero": False}}},
               "arms": {"raw": {"runs": {}}}}


@pytest.fixture
def calls(monkeypatch):
    seen = []

    def fake_run_ablation(cfg, **_):
        seen.append(cfg.ablation.seeds)
        return FAKE_REPORT

    monkeypatch.setattr(ablation_pkg, "run_ablation", fake_run_ablation)
    return seen


def test_the_ablation_stage_comes_after_the_data_stages_only_when_asked(tmp_path):
    assert "ablation" not in [s.name for s in build_stages(layout(_config(tmp_path)))]
    names = [s.name for s in build_stages(_with_ablation(tmp_path))]
    assert names[-1] == "ablation" and names.index("tokenize") < names.index("ablation")
    assert "ablation" not in [s.name for s in build_stages(_with_ablation(tmp_path, "ablation.pipeline_stage=false"))]


def test_a_rerun_skips_the_finished_ablation_stage_and_a_changed_recipe_reruns_it(tmp_path, calls):
    cfg = _with_ablation(tmp_path)
    runner, stages = _runner(tmp_path, cfg)
    first = runner.run(stages[-1])
    assert calls == [3] and not first.skipped
    assert first.report["verdicts"] == FAKE_REPORT["verdicts"]
    assert first.report["comparisons"]["curated"]["eval/loss"] == {"mean": -0.1, "ci_low": -0.2, "ci_high": 0.0,
                                                                   "excludes_zero": False}
    assert "arms" not in first.report  # the full report stays in the ablation's own files
    assert summarize(runner.results)["ablation"]["verdicts"] == FAKE_REPORT["verdicts"]

    runner, stages = _runner(tmp_path, cfg)
    assert runner.run(stages[-1]).skipped and calls == [3]

    runner, stages = _runner(tmp_path, _with_ablation(tmp_path, "ablation.seeds=2"))
    assert not runner.run(stages[-1]).skipped and calls == [3, 2]

    # a raw arm's file outside the pipeline's folder changed: no upstream key covers it, this stage's does
    with (tmp_path / "raw.jsonl").open("a") as fh:
        fh.write('{"text": "one more raw document"}\n')
    runner, stages = _runner(tmp_path, _with_ablation(tmp_path, "ablation.seeds=2"))
    assert not runner.run(stages[-1]).skipped and calls == [3, 2, 2]


def test_a_changed_data_stage_reruns_the_ablation_stage(tmp_path, calls):
    cfg = _with_ablation(tmp_path)
    runner, stages = _runner(tmp_path, cfg)
    runner.run(stages[-1])
    runner, stages = _runner(tmp_path, _with_ablation(tmp_path, "scorer.calibration.keep_rate_web=0.5"))
    assert not runner.run(stages[-1]).skipped and calls == [3, 3]

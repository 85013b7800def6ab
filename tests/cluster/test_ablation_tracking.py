"""An ablation in the tracker: arm-seed runs tagged by ablation and arm, the report as one event."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cluster.ablation import job
from cluster.ablation.prepare import prepare
from cluster.ablation.runs import arm_seeds
from shared.config import ConfigError, load_config
from tests.cluster.ablation_corpus import ablation_config

TINY = Path(__file__).parents[2] / "configs" / "tiny.yaml"


def spooled(spool: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(spool.glob("*.jsonl")) for line in f.read_text().splitlines()]


def test_every_arm_seed_carries_its_ablation_and_arm_tags(tmp_path):
    cfg = ablation_config(tmp_path, "train.tags=[mine]")
    plans, _ = prepare(cfg, log=lambda *_: None)
    items = arm_seeds(plans, [0, 1], parent_run="p")
    assert {(i.arm, tuple(i.cfg.train.tags)) for i in items} == {
        ("clean", ("mine", "ablation:abl", "arm:clean")), ("noisy", ("mine", "ablation:abl", "arm:noisy"))}
    # tags say where a run is shown, not what it computes: they do not change which results are reused
    untagged = items[0].cfg.model_copy(update={"train": items[0].cfg.train.model_copy(update={"tags": []})})
    assert type(items[0])(items[0].arm, 0, untagged, items[0].data_key).key() == items[0].key()


def test_the_trainer_adds_the_configured_tags_after_its_own(tmp_path):
    from services.trainer.launch import run_local

    cfg = load_config(TINY, ["train.steps=1", "train.eval_every=100", "train.checkpoint_every=100",
                             f"train.out_dir={tmp_path / 'runs'}", "train.tags=[ablation:x, arm:raw]",
                             "tracker.mode=offline", f"tracker.spool_dir={tmp_path / 'spool'}"])
    run_local(cfg)
    inits = [op["body"] for op in spooled(tmp_path / "spool") if op["op"] == "init"]
    assert [b["tags"] for b in inits] == [["train", cfg.model.ffn, "ablation:x", "arm:raw"]]


@pytest.mark.parametrize("tag", [" padded", "", "x" * 65, "tab\there"])
def test_a_tag_the_tracker_would_refuse_fails_at_config_load(tag):
    with pytest.raises(ConfigError, match="tags"):
        load_config(TINY, [f"train.tags=[{json.dumps(tag)}]"])


def test_the_ablation_run_logs_its_report_as_one_event(tmp_path, monkeypatch):
    """Training stood in for (the Ray tests train for real): what reaches the tracker is the report."""
    cfg = ablation_config(tmp_path, "tracker.mode=offline", f"tracker.spool_dir={tmp_path / 'spool'}")

    def fake_run_all(items, *args, on_event, **kwargs):
        loss = {"clean": [3.0, 3.1], "noisy": [3.5, 3.4]}
        results = {(i.arm, i.seed): {"metrics": {"eval/loss": loss[i.arm][i.seed], "odd": math.nan},
                                     "attempts": 1} for i in items}
        return results, {}

    monkeypatch.setattr(job, "_ray", lambda cfg: None)
    monkeypatch.setattr(job, "run_all", fake_run_all)
    report = job.run_ablation(cfg, metrics=None, log=lambda *_: None)
    ops = spooled(tmp_path / "spool")
    events = [e for op in ops if op["op"] == "batch" for e in op["body"].get("events", [])]
    (logged,) = [e for e in events if e["kind"] == "ablation_report"]
    assert logged["data"]["verdicts"] == report["verdicts"]
    assert logged["data"]["comparisons"]["noisy"]["eval/loss"]["differences"] == pytest.approx([0.5, 0.3])
    assert logged["data"]["arms"]["clean"]["runs"]["0"]["metrics"]["odd"] == "NaN"  # kept, as the tracker spells it
    assert "2 arms × 2 seeds against clean" in logged["message"]
    ablation_run = [op for op in ops if op["op"] == "init" and "ablation" in op["body"]["tags"]]
    assert [op["run"] for op in ablation_run] == [report["ablation_run"]]

"""`moelab ablate`: arms × seeds on Ray, a rerun that reuses finished runs, retries, and bad input refused before training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.ablation import run_ablation
from cluster.ablation.documents import RecipeError
from cluster.ablation.prepare import prepare
from cluster.ablation.runs import arm_seeds, finished
from shared.data.atomic import atomic_write_json
from tests.cluster.ablation_corpus import ablation_config, write_jsonl


def checkpoint_step(checkpoint: str, cfg) -> dict[str, float]:
    """A stand-in for the evaluation suite: the step the final checkpoint records."""
    return {"stand_in/step": float(json.loads((Path(checkpoint) / "meta.json").read_text())["step"])}


def fails_for_noisy_seed_1(checkpoint: str, cfg) -> dict[str, float]:
    """Fails every time for one arm-seed, and once (then succeeds) for another."""
    if cfg.train.run_name == "noisy-s1":
        raise ValueError("planted failure")
    marker = Path(checkpoint).parents[2] / "failed-once"
    if cfg.train.run_name == "clean-s0" and not marker.exists():
        marker.write_text("x")
        raise ValueError("planted failure, first attempt only")
    return checkpoint_step(checkpoint, cfg)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_arm_seed_is_reported_and_a_rerun_reuses_them(ray_local, tmp_path):
    cfg = ablation_config(tmp_path)
    report = run_ablation(cfg, metrics=checkpoint_step, log=lambda *_: None)
    out = tmp_path / "out"
    on_disk = json.loads((out / "report.json").read_text())
    assert (out / "report.md").read_text().startswith("# Ablation `abl`")
    assert (out / "report.png").read_bytes()[:4] == b"\x89PNG"
    assert set(on_disk["arms"]) == {"clean", "noisy"}
    for arm in ("clean", "noisy"):
        runs = on_disk["arms"][arm]["runs"]
        assert set(runs) == {"0", "1"}
        assert all(r["metrics"]["stand_in/step"] == 3.0 and "eval/loss" in r["metrics"] for r in runs.values())
    comp = on_disk["comparisons"]["noisy"]["eval/loss"]
    noisy = on_disk["arms"]["noisy"]["runs"]
    clean = on_disk["arms"]["clean"]["runs"]
    assert comp["differences"] == [noisy[s]["metrics"]["eval/loss"] - clean[s]["metrics"]["eval/loss"] for s in "01"]
    assert len(report["verdicts"]) == 2  # one per metric for the one non-baseline arm
    # the held-out texts planted in the clean arm were removed, the malformed line counted
    assert on_disk["arms"]["clean"]["documents"]["held_out_removed"] == 2
    assert sum(on_disk["arms"]["clean"]["documents"]["malformed"].values()) == 1

    again = run_ablation(cfg, metrics=checkpoint_step, log=lambda *_: None)
    assert all(r["skipped"] for a in again["arms"].values() for r in a["runs"].values())
    assert again["comparisons"] == report["comparisons"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_failed_arm_seed_is_retried_once_then_reported_not_dropped(ray_local, tmp_path):
    cfg = ablation_config(tmp_path)
    report = run_ablation(cfg, metrics=fails_for_noisy_seed_1, log=lambda *_: None)
    assert report["failed_runs"] == 1
    assert "planted failure" in report["arms"]["noisy"]["failed"]["1"]
    assert report["arms"]["clean"]["runs"]["0"]["attempts"] == 2  # failed once, then succeeded
    assert report["comparisons"]["noisy"]["eval/loss"]["seeds"] == [0]  # compared on the seed both finished
    assert "noisy seed 1" in (tmp_path / "out" / "report.md").read_text()


def test_a_glob_matching_nothing_names_the_arm_before_training(tmp_path):
    cfg = ablation_config(tmp_path)
    arms = [cfg.ablation.arms[0], cfg.ablation.arms[1].model_copy(update={"documents": [str(tmp_path / "nope*.jsonl")]})]
    cfg = cfg.model_copy(update={"ablation": cfg.ablation.model_copy(update={"arms": arms})})
    with pytest.raises(RecipeError, match=r"ablation arm 'noisy': .*nope\*\.jsonl' matches no file"):
        prepare(cfg, log=lambda *_: None)


def test_an_empty_held_out_set_is_refused(tmp_path):
    cfg = ablation_config(tmp_path)
    empty = write_jsonl(tmp_path / "empty.jsonl", [], "held", extra_lines=("{broken",))
    cfg = cfg.model_copy(update={"ablation": cfg.ablation.model_copy(update={"eval_documents": [str(empty)]})})
    with pytest.raises(RecipeError, match="eval_documents: 1 file.* no document with a text; .* must not be empty"):
        prepare(cfg, log=lambda *_: None)


def test_an_arm_with_fewer_tokens_than_the_budget_is_refused_before_training(tmp_path):
    cfg = ablation_config(tmp_path, steps=500)  # 500 x 64 = 32,000 tokens; the clean arm holds ~3,700
    with pytest.raises(RecipeError, match=r"ablation arm 'clean' holds [\d,]+ tokens .* budget is 32,000 tokens"):
        prepare(cfg, log=lambda *_: None)
    assert not (tmp_path / "out" / "runs").exists()


def test_rates_naming_a_source_the_arm_lacks_are_refused(tmp_path):
    cfg = ablation_config(tmp_path)
    arms = [cfg.ablation.arms[0].model_copy(update={"rates": {"code": 1.0}}), cfg.ablation.arms[1]]
    cfg = cfg.model_copy(update={"ablation": cfg.ablation.model_copy(update={"arms": arms})})
    with pytest.raises(RecipeError, match="rates name source 'code', which none of its documents carry"):
        prepare(cfg, log=lambda *_: None)


def test_a_finished_arm_seed_is_not_reused_once_its_arm_data_changed(tmp_path):
    """The arm's shard paths stay the same when its documents change: the result key must see the data."""
    cfg = ablation_config(tmp_path)

    def items():
        plans, _ = prepare(cfg, log=lambda *_: None)
        return {(i.arm, i.seed): i for i in arm_seeds(plans, [0], None)}

    before = items()
    for item in before.values():
        atomic_write_json(item.result_file, {"key": item.key(), "metrics": {"eval/loss": 1.0}})
    assert all(finished(i) is not None for i in items().values())  # unchanged: reused
    with (tmp_path / "corpus" / "noisy.jsonl").open("a") as fh:
        fh.write(json.dumps({"text": "a new noisy document " * 20, "source": "prose"}) + "\n")
    assert finished(items()[("noisy", 0)]) is None


def test_arm_seeds_leave_the_final_model_to_the_ablations_own_suite(tmp_path):
    """The trainer's in-loop suite would score every final model a second time at its last step."""
    cfg = ablation_config(tmp_path, "train.eval_suite.enabled=true")
    plans, _ = prepare(cfg, log=lambda *_: None)
    assert plans and not any(p.cfg.train.eval_suite.enabled for p in plans)

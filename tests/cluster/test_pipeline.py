"""The whole pipeline on a small slice of the demo corpus: every stage, manifests, lineage, reruns."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest

from cluster.pipeline import run_pipeline
from shared.config import load_config

ROOT = Path(__file__).resolve().parents[2]
STAGES = ["filter", "label", "distill", "calibrate", "score", "tokenize", "train"]


def _slice(src: Path, dst: Path, n: int) -> str:
    """The first n lines of a demo source (gzip JSONL), written as plain JSONL."""
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        lines = [next(fh) for _ in range(n)]
    dst.write_text("".join(lines), encoding="utf-8")
    return str(dst)


def _config(tmp: Path, *overrides: str):
    demo = load_config(ROOT / "configs" / "demo.yaml")
    inputs = []
    for src in demo.data.inputs:
        if src.name not in ("wiki", "python", "sympy", "sympy_physics"):
            continue
        path = _slice(ROOT / src.paths[0], tmp / f"{src.name}.jsonl", 60)
        inputs.append({"name": src.name, "kind": src.kind, "paths": [path]})
    base = [
        f"train.out_dir={tmp}/runs", "tracker.mode=offline", f"tracker.spool_dir={tmp}/spool",
        "scorer.oracle.sample_size=120", "scorer.heads.max_epochs=3", "scorer.heads.max_tokens=64",
        "scorer.heads.judge_dim=64", "scorer.heads.judge_heads=4", "mixture.tokenizer.vocab_size=512",
        "model.vocab_size=512", "train.steps=4", "train.seq_len=64", "train.micro_batch_size=2", "train.grad_accum=1",
        "train.eval_every=4", "train.checkpoint_every=4", "model.max_seq_len=64", "mixture.use_ray=false",
        "data.filter.workers=0",
        "model.moe.balance.calibration_tokens=65536",  # the smallest calibration: this test is about the stages
    ]
    cfg = load_config(ROOT / "configs" / "demo.yaml", [*base, *overrides])
    return cfg.model_copy(update={"data": cfg.data.model_copy(update={"inputs": [type(cfg.data.inputs[0])(**i) for i in inputs]})})


def _spooled_runs(spool: Path) -> dict[str, dict]:
    runs = {}
    for f in spool.glob("*.jsonl"):
        for line in f.read_text().splitlines():
            op = json.loads(line)
            if op.get("op") == "init":
                runs[op["body"]["id"]] = op["body"]
    return runs


@pytest.mark.slow
def test_pipeline_runs_every_stage_then_skips_them_and_reruns_only_what_a_knob_changes(tmp_path, ray_local):
    cfg = _config(tmp_path)
    t0 = time.perf_counter()
    summary = run_pipeline(cfg, log=lambda *_: None)
    first = time.perf_counter() - t0
    assert list(summary["stages"]) == STAGES
    assert not any(s["skipped"] for s in summary["stages"].values())
    root = tmp_path / "runs" / "pipeline" / "demo"
    for stage in STAGES:
        manifest = json.loads((root / "stages" / f"{stage}.json").read_text())
        assert len(manifest["key"]) == 64 and manifest["report"] is not None
    assert summary["documents"]["kept"] > 0 and summary["train"]["steps"] == 4
    runs = _spooled_runs(tmp_path / "spool")
    pipeline_id = summary["pipeline_run"]
    children = [r for r in runs.values() if r.get("parent") == pipeline_id]
    assert {"train"} <= {t for r in children for t in r.get("tags", [])}, "the model run is not linked to the pipeline"
    stage_runs = {t: r["id"] for r in children if "stage" in r["tags"] for t in r["tags"] if t in STAGES}
    assert sorted(stage_runs) == sorted(STAGES), "one tracker run per stage, each a child of the pipeline run"
    below = {t for r in runs.values() if r.get("parent") == stage_runs["train"] for t in r["tags"]}
    assert "train" in below and "stage" not in below, "the training run is a child of the train stage's run"
    assert "MOELAB_PARENT_RUN" not in os.environ, "a later run in this process would be taken for a stage's child"

    t0 = time.perf_counter()
    again = run_pipeline(cfg, log=lambda *_: None)
    assert all(s["skipped"] for s in again["stages"].values())
    assert time.perf_counter() - t0 < 0.1 * first

    changed = run_pipeline(_config(tmp_path, "scorer.calibration.keep_rate_web=0.5"), log=lambda *_: None)
    skipped = {name for name, s in changed["stages"].items() if s["skipped"]}
    assert skipped == {"filter", "label", "distill"}


def test_a_new_heads_version_reruns_distill_and_what_follows_it(tmp_path, monkeypatch):
    """Old heads.pt files must not be loaded by a changed Judge: the distill key names HEADS_VERSION."""
    from cluster.pipeline import build_stages
    from cluster.stages import StageResult, StageRunner
    from services.scorer import heads

    def keys() -> dict[str, str]:
        runner = StageRunner(tmp_path)
        for stage in build_stages(_config(tmp_path)):
            runner.results[stage.name] = StageResult(stage.name, runner.key_of(stage), {}, 0.0, skipped=True)
        return {name: r.key for name, r in runner.results.items()}

    before = keys()
    monkeypatch.setattr(heads, "HEADS_VERSION", heads.HEADS_VERSION + 1)
    after = keys()
    assert [s for s in STAGES if before[s] != after[s]] == ["distill", "calibrate", "score", "tokenize", "train"]

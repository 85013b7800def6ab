"""The distill stage with `heads.members`: k heads per kind stored, loaded back as their mean, scored."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from typer.testing import CliRunner

from moelab.cli import app
from services.scorer.cascade import HEADS_FILE, CascadeScorer
from services.scorer.heads import HeadEnsemble
from services.scorer.sample_docs import python_docs
from shared.config.loader import load_config


def test_ensemble_heads_train_store_and_score_as_the_mean_of_their_members(tmp_path):
    docs = python_docs(40, 40, seed=0, max_chars=300)
    inp = tmp_path / "filtered"
    inp.mkdir()
    pq.write_table(pa.table({"id": [d["id"] for d in docs], "text": [d["text"] for d in docs],
                             "source": [d["source"] for d in docs], "meta": ["{}"] * len(docs)}), inp / "part-0.parquet")
    recipe = tmp_path / "scorer.yaml"
    recipe.write_text(
        "name: scorer-members\ntracker: {mode: disabled}\n"
        "data: {inputs: [{name: pydoc, kind: web, paths: [x]}, {name: stdlib, kind: code, paths: [x]}]}\n"
        f"scorer:\n  out_dir: {tmp_path / 'out'}\n  inputs: ['{inp}/*.parquet']\n  oracle: {{sample_size: 80}}\n"
        "  heads: {max_tokens: 64, window_tokens: 64, judge_dim: 32, judge_heads: 2, max_epochs: 2, patience: 2, members: 2}\n"
    )
    runner = CliRunner()
    for stage in ("label", "train"):
        res = runner.invoke(app, ["score", stage, str(recipe)])
        assert res.exit_code == 0, f"moelab score {stage} failed:\n{res.output}\n{res.exception!r}"

    blob = torch.load(tmp_path / "out" / HEADS_FILE, weights_only=False)
    report = json.loads((tmp_path / "out" / "train_report.json").read_text())
    for name, entry in blob["rubrics"].items():
        assert isinstance(entry["probe"], list) and len(entry["judge"]) == 2
        assert len(report["rubrics"][name]["judge"]["best_epoch"]) == 2
        assert not torch.equal(entry["probe"][0]["out.weight"], entry["probe"][1]["out.weight"])  # seeds differ

    scfg = load_config(str(recipe)).scorer
    scorer = CascadeScorer.load(tmp_path / "out", scfg)
    probe, judge = scorer.heads["general"]
    assert isinstance(probe, HeadEnsemble) and isinstance(judge, HeadEnsemble) and len(judge.members) == 2
    texts, kinds = [d["text"] for d in docs[:6]], [d["kind"] for d in docs[:6]]
    res = scorer.score(texts, kinds, mode="cascade")
    assert len(res["quality"]) == 6 and all(0.0 <= q <= 1.0 for q in res["quality"])

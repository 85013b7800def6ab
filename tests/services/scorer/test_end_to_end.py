"""End to end on CPU with the embedded defaults: label → train → calibrate → score, through the CLI."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from moelab.cli import app
from services.scorer.sample_docs import python_docs


@pytest.mark.slow  # MiniLM features for 600 documents and two heads per rubric: minutes on 2 cores
def test_label_train_calibrate_score_and_judge_beats_probe_beats_length_baseline(ray_local, tmp_path):
    # 300 labels per rubric (195 train / 45 val / 60 test): with 200 the Judge beat the Probe on 9 of
    # 10 rubric × sampling pairs (python_docs seeds 0-4), with 300 on 10 of 10 (docs/scorer.md)
    docs = python_docs(300, 300, seed=0, max_chars=400)  # the backbone sees what the oracle rated
    # Unlabelled documents for the thresholds: τ_drop promises ≤ 1% keeper loss only with ≥ 99
    # keepers per rubric, i.e. ≥ 330 web documents at a 30% keep rate and ≥ 198 code at 50%.
    seen = {d["text"] for d in docs}
    fresh = [d for d in python_docs(660, 600, seed=1, max_chars=400) if d["text"] not in seen]
    unlabelled = [d for d in fresh if d["kind"] == "web"][:360] + [d for d in fresh if d["kind"] == "code"][:220]
    unlabelled = [{**d, "id": f"cal-{d['id']}"} for d in unlabelled]
    inp, extra = tmp_path / "filtered", tmp_path / "unlabelled"
    for folder, rows in ((inp, docs), (extra, unlabelled)):
        folder.mkdir()
        for s in range(2):
            part = rows[s::2]
            pq.write_table(pa.table({"id": [d["id"] for d in part], "text": [d["text"] for d in part],
                                     "source": [d["source"] for d in part],
                                     "meta": [json.dumps({"n": i}) for i in range(len(part))]}),
                           folder / f"part-{s}.parquet")
    recipe, recipe_calibrate = tmp_path / "scorer.yaml", tmp_path / "scorer-calibrate.yaml"
    for path, inputs in ((recipe, f"['{inp}/*.parquet']"), (recipe_calibrate, f"['{inp}/*.parquet', '{extra}/*.parquet']")):
        path.write_text(
            "name: scorer-e2e\n"
            "tracker: {mode: disabled}\n"
            "data: {inputs: [{name: pydoc, kind: web, paths: [x]}, {name: stdlib, kind: code, paths: [x]}]}\n"
            f"scorer:\n  out_dir: {tmp_path / 'out'}\n  inputs: {inputs}\n"
            "  oracle: {sample_size: 600}\n"
            "  heads: {max_tokens: 128, judge_dim: 64, judge_heads: 4, max_epochs: 40, patience: 6}\n"
            "  calibration: {keeper_loss_confidence: 0}\n"  # ~110 keepers: the in-expectation rule

        )
    runner = CliRunner()
    for stage, path in (("label", recipe), ("train", recipe), ("calibrate", recipe_calibrate), ("run", recipe)):
        res = runner.invoke(app, ["score", stage, str(path)])
        assert res.exit_code == 0, f"moelab score {stage} failed:\n{res.output}\n{res.exception!r}"

    label = json.loads((tmp_path / "out" / "label_report.json").read_text())
    assert label["oracle"] == "heuristic (stand-in)" and label["labelled"] == 600
    report = json.loads((tmp_path / "out" / "calibrate_report.json").read_text())
    assert report["calibration"]["fitted_on"] == "580 unlabelled documents"
    assert report["calibration"]["documents_per_source"] == {"pydoc": 360, "stdlib": 220}
    assert all(n >= 99 for n in report["calibration"]["keepers_per_rubric"].values())
    for src, target in (("pydoc", 0.3), ("stdlib", 0.5)):
        rate = report["keep_rate"][src]
        assert abs(rate["realised_calibration"] - target) <= 0.02
        assert abs(rate["realised"] - target) <= 0.15  # 60 held-out documents the thresholds never saw
    # enough keepers for a finite τ_drop (a margin below τ_keep, so usually negative): the cascade skips work
    assert all(math.isfinite(r["tau_drop"]) for r in report["rubrics"].values())
    assert report["compute"]["judge_passes_skipped"] > 0
    # ~50 held-out keepers can only catch a gross failure of the ≤ 1% promise (a naive in-sample
    # τ_drop lost ~9% of new keepers); the promise itself is tested in test_calibrate.py
    assert report["compute"]["keeper_loss"] <= 0.10 and report["compute"]["flops_saved"] > 0
    assert all(p <= 0.03 for p in report["calibration"]["keeper_loss_p90"].values())
    # and the other exit: ~470 calibration rejects give a finite τ_accept, bounded the same way
    assert math.isfinite(report["tau_accept"]["all-rubrics"]) and report["compute"]["probe_kept"] > 0
    assert report["compute"]["false_keep"] <= 0.10
    assert all(p <= 0.03 for p in report["calibration"]["false_keep_p90"].values())
    for name, r in report["rubrics"].items():
        q = r["spearman_quality"]
        assert q["probe"] > q["length_baseline"] and q["judge"] > q["length_baseline"], f"{name}: {q}"
        if name == "general":
            assert q["judge"] > q["probe"], f"{name}: the Judge must beat the Probe on held-out data: {q}"
        else:
            # the code rubric now reads comments and identifiers, which the Probe's pooled features carry
            # about as well as the Judge (held out here: Probe 0.696, Judge 0.683); neither may fall behind
            assert q["judge"] > q["probe"] - 0.05 and q["probe"] > q["judge"] - 0.05, f"{name}: {q}"
    run = json.loads((tmp_path / "out" / "run_report.json").read_text())
    assert run["docs"] == 600 and run["shards_scored"] == 2 and run["probe_kept"] > 0

"""`moelab eval`: a checkpoint to BPB and task numbers; bad checkpoints and task files stop before any work."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from moelab.cli import app
from shared.eval.tasks import SUITE_DIR
from tests.shared.checkpoint.fake_run import make_run

runner = CliRunner()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder, _ = make_run(tmp_path_factory.mktemp("evalcli"), "tiny")
    return folder


def _one_task_folder(tmp_path, name: str = "prose_cloze", lines: list[str] | None = None):
    """A copy of one suite task whose YAML points at a JSONL in tmp_path (absolute path)."""
    folder = tmp_path / "tasks"
    folder.mkdir(parents=True)
    shutil.copy(SUITE_DIR / "utils.py", folder)
    data = folder / f"{name}.jsonl"
    src = (SUITE_DIR / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    data.write_text("\n".join(lines if lines is not None else src[:4]) + "\n", encoding="utf-8")
    yaml_text = (SUITE_DIR / f"{name}.yaml").read_text(encoding="utf-8")
    (folder / f"{name}.yaml").write_text(yaml_text.replace(f"data/reference/tasks/{name}.jsonl", str(data)),
                                         encoding="utf-8")
    return folder, src


def test_eval_prints_bpb_per_reference_set_and_task_metrics(run, tmp_path):
    folder, _ = _one_task_folder(tmp_path)
    out = tmp_path / "metrics.json"
    result = runner.invoke(app, ["eval", str(run), "--tasks", str(folder), "--output", str(out),
                                 "--reference-texts", "2"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(out.read_text())
    assert {"bpb/prose", "bpb/code", "bpb/math"} <= set(metrics)
    assert all(0 < metrics[f"bpb/{s}"] < 20 for s in ("prose", "code", "math"))
    assert {"task/moelab_prose_cloze/acc", "task/moelab_prose_cloze/acc_norm",
            "task/moelab_prose_cloze/logprob"} <= set(metrics)
    assert json.loads(result.output.strip().splitlines()[-1]) == metrics


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["eval", str(tmp_path / "nowhere"), "--tasks", ""])
    assert result.exit_code == 2
    assert "nowhere" in result.output


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    folder, _ = make_run(tmp_path, "broken")
    for f in (folder / "checkpoints").glob("step_*/*.distcp"):
        f.write_bytes(b"not a tensor file")
    result = runner.invoke(app, ["eval", str(folder), "--tasks", "", "--no-bpb"])
    assert result.exit_code == 2
    assert "corrupt" in result.output


def test_malformed_task_line_is_named_with_its_line_number_before_loading_the_model(run, tmp_path):
    _, src = _one_task_folder(tmp_path / "probe")
    folder, _ = _one_task_folder(tmp_path, lines=[src[0], src[1], '{"context": "x", "choices": ["a"]', src[2]])
    result = runner.invoke(app, ["eval", str(run), "--tasks", str(folder), "--no-bpb"])
    assert result.exit_code == 2
    assert "prose_cloze.jsonl:3: not valid JSON" in result.output

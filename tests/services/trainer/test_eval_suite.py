"""Evaluation in the loop: BPB per reference set and the task suite, logged every eval step, equal to
scoring the saved checkpoint afterwards; bounded in time; a broken suite stops the run before step 0."""

from __future__ import annotations

import json

import pytest

from services.trainer.evaluation import SuiteEvaluator
from services.trainer.launch import run_local
from shared.checkpoint.read import load_trained_model
from shared.config.train import EvalSuiteConfig
from shared.eval.suite import evaluate_model
from shared.eval.tasks import TaskFileError
from tests.services.trainer.conftest import tiny_cfg

SMALL = ("train.eval_suite.enabled=true", "train.steps=4", "train.eval_every=2", "train.checkpoint_every=4", "train.eval_suite.reference_texts=1",
         "train.eval_suite.task_items=2")


def test_run_logs_bpb_and_task_curves_equal_to_scoring_the_checkpoint(tmp_path, doc_globs):
    cfg = tiny_cfg(tmp_path, doc_globs, *SMALL)
    result = run_local(cfg)
    rows = [json.loads(line) for line in (tmp_path / "runs" / "tiny" / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if "eval/bpb/prose" in r]
    assert [r["step"] for r in logged] == [1, 3]
    last = logged[-1]
    for key in ("eval/bpb/prose", "eval/bpb/code", "eval/bpb/math", "eval/task/moelab_prose_cloze/acc",
                "eval/task/moelab_code_continuation/acc_norm", "eval/task/moelab_code_cloze/logprob"):
        assert key in last and key in result
    assert last["eval/skipped_for_time"] == 0
    # the trainer's eval mode routes with the bias `balance.eval_bias` names; load that one
    bias = "live" if cfg.model.moe.balance.eval_bias == "live" else "average"
    loaded = load_trained_model(tmp_path / "runs" / "tiny", bias=bias, require_tokenizer=True)
    again = evaluate_model(loaded.model, loaded.tokenizer, reference_sets=["prose", "code", "math"], seq_len=64,
                           reference_texts=1, task_items=2)
    for key, value in again.items():
        assert last[f"eval/{key}"] == pytest.approx(value, abs=1e-5), key


def test_time_budget_skips_whole_sets_and_counts_them(tmp_path, doc_globs):
    from shared.data.tokenizer import train_tokenizer
    from shared.model import MoETransformer

    cfg = tiny_cfg(tmp_path, doc_globs)
    tok = train_tokenizer(["a b c d e f g"] * 50, tmp_path / "tok2", vocab_size=300)
    model = MoETransformer(cfg.model.model_copy(update={"vocab_size": 300}))
    suite = SuiteEvaluator(EvalSuiteConfig(reference_texts=1, task_items=1, max_seconds=1e-9), tok, 64)
    out = suite(model, next(model.parameters()).device)
    assert out == {"eval/skipped_for_time": 7.0}  # 3 reference sets + 4 tasks, none started


def test_malformed_task_file_stops_the_run_before_the_first_step(tmp_path, doc_globs):
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "t.jsonl").write_text('{"context": "x", "choices": ["a", "b"], "gold": 0}\n{"context": 1}\n')
    (folder / "t.yaml").write_text(f"task: t\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {folder}/t.jsonl\n"
                                   "output_type: multiple_choice\ndoc_to_text: context\ndoc_to_choice: choices\n"
                                   "doc_to_target: gold\n")
    cfg = tiny_cfg(tmp_path, doc_globs, *SMALL, f"train.eval_suite.tasks_path={folder}")
    with pytest.raises(TaskFileError, match=r"t.jsonl:2: field 'context' must be a string"):
        run_local(cfg)
    assert not (tmp_path / "runs" / "tiny" / "checkpoints").exists() or not any(
        (tmp_path / "runs" / "tiny" / "checkpoints").iterdir())


def test_unknown_reference_set_fails_at_config_time():
    with pytest.raises(ValueError, match=r"eval_suite.reference_sets: unknown \['nope'\]"):
        EvalSuiteConfig(reference_sets=["nope"])

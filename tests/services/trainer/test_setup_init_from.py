"""`train.init_from`: continued pretraining from an exported-then-imported model. The new run starts at
step 0 with the imported weights bit for bit and a fresh optimizer; a checkpoint of another model
config, or no checkpoint, is refused at config check; `--resume` still takes the run's own checkpoint."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from typer.testing import CliRunner

from moelab.cli import app
from services.exporter.export import export_checkpoint
from services.exporter.importer import import_hf
from services.trainer.launch import run_local
from services.trainer.setup import WorkerContext, set_up
from shared.checkpoint import load_trained_model
from shared.config.validation import check_config
from tests.services.exporter.foreign_folders import foreign_folder
from tests.services.trainer.conftest import ROOT, tiny_cfg
from tests.shared.checkpoint.fake_run import make_run

CPU = WorkerContext(0, 1, torch.device("cpu"))


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """A tiny checkpoint (routers with live bias ≠ average ≠ 0) exported to HF and imported back."""
    tmp = tmp_path_factory.mktemp("src")
    run, _ = make_run(tmp, "tiny")
    export_checkpoint(run, tmp / "hf", greedy_tokens=4)
    return import_hf(tmp / "hf", tmp / "imported").parent.parent


def _differing(a: dict, b: dict) -> list[str]:
    assert set(a) == set(b)
    return [k for k in a if not torch.equal(a[k], b[k])]


def test_run_from_an_import_starts_at_step_0_with_its_weights_bitwise_and_a_fresh_optimizer(tmp_path, doc_globs, imported):
    cfg = tiny_cfg(tmp_path, doc_globs, f"train.init_from={imported}", "train.steps=2", "train.checkpoint_every=2")
    assert [f for f in check_config(cfg) if f.error] == []
    weights = load_trained_model(imported).model.state_dict()
    w = set_up(cfg, CPU, resume=False)
    w.bar.close()
    assert w.start == 0 and w.optimizer.step_count == 0
    assert _differing(w.model.state_dict(), weights) == []

    result = run_local(cfg)
    assert result["steps"] == 2 and torch.isfinite(torch.tensor(result["loss"]))
    ckpt = tmp_path / "runs" / "tiny" / "checkpoints" / "step_00000002"
    assert json.loads((ckpt / "meta.json").read_text())["optim_step"] == 2
    trained = load_trained_model(ckpt).model.state_dict()
    assert _differing(trained, weights)  # it trained from there


def test_a_transformers_made_glm4_moe_folder_imports_and_continues_pretraining(tmp_path, doc_globs):
    imported = tmp_path / "imported"
    import_hf(foreign_folder(tmp_path, "Glm4MoeForCausalLM"), imported)
    recipe = tmp_path / "continue.yaml"  # tiny's training with the import's model section
    model = yaml.safe_load((imported / "config.yaml").read_text())["model"]
    recipe.write_text(yaml.safe_dump({"base": str(ROOT / "configs" / "tiny.yaml"), "model": model}))
    cfg = tiny_cfg(tmp_path, doc_globs, f"train.init_from={imported}", "train.steps=2", "train.checkpoint_every=2",
                   f"mixture.tokenizer.path={imported / 'tokenizer' / 'tokenizer.json'}", recipe=recipe)
    assert [f for f in check_config(cfg) if f.error] == []
    weights = load_trained_model(imported).model.state_dict()
    w = set_up(cfg, CPU, resume=False)
    w.bar.close()
    assert w.start == 0 and _differing(w.model.state_dict(), weights) == []
    result = run_local(cfg)
    assert result["steps"] == 2 and torch.isfinite(torch.tensor(result["loss"]))
    trained = load_trained_model(tmp_path / "runs" / "tiny").model.state_dict()
    assert _differing(trained, weights)  # it trained from there


def test_resume_takes_the_runs_own_checkpoint_over_init_from(tmp_path, doc_globs, imported):
    cfg = tiny_cfg(tmp_path, doc_globs, f"train.init_from={imported}", "train.steps=2", "train.checkpoint_every=2")
    run_local(cfg)
    longer = tiny_cfg(tmp_path, doc_globs, f"train.init_from={imported}", "train.steps=4", "train.checkpoint_every=2")
    w = set_up(longer, CPU, resume=True)
    w.bar.close()
    own = load_trained_model(tmp_path / "runs" / "tiny").model.state_dict()
    assert w.start == 2 and w.optimizer.step_count == 2
    assert _differing(w.model.state_dict(), own) == []


def test_init_from_of_another_model_config_is_refused_at_config_check_naming_both(tmp_path, doc_globs, imported):
    cfg = tiny_cfg(tmp_path, doc_globs, f"train.init_from={imported}", "model.moe.n_routed_experts=4")
    errors = [f for f in check_config(cfg) if f.error]
    assert [f.field for f in errors] == ["train.init_from"]
    assert str(imported / "config.yaml") in errors[0].message
    assert "model.moe.n_routed_experts: 8 there vs 4 here" in errors[0].message


def test_init_from_without_a_checkpoint_is_refused_by_moelab_config_check(tmp_path, doc_globs):
    empty = tmp_path / "empty_run"
    empty.mkdir()
    train, held_out = doc_globs
    result = CliRunner().invoke(app, ["config", "check", str(ROOT / "configs" / "tiny.yaml"),
                                      f"train.init_from={empty}", f"mixture.documents=[{train}]",
                                      f"mixture.eval_documents=[{held_out}]", "mixture.rates={}"])
    assert result.exit_code == 2
    assert "train.init_from: no loadable checkpoint" in result.output and str(empty) in result.output

"""A checkpoint written by two gloo workers under expert parallelism (EP=2, dense parameters
FSDP2-sharded over dp=2) exports whole: every expert from both ranks, logits within 1e-4 and
greedy equal in transformers, and the import gives the checkpoint back bit for bit."""

from __future__ import annotations

import pytest
import torch

from services.exporter.export import export_checkpoint
from services.exporter.importer import import_hf
from services.exporter.roundtrip import load_hf
from services.trainer.launch import spawn_local
from services.trainer.loop import run_dir
from shared.checkpoint import load_trained_model
from tests.services.trainer.conftest import doc_globs, tiny_cfg  # noqa: F401  (doc_globs is a fixture)

pytestmark = pytest.mark.slow


def test_ep2_checkpoint_exports_whole_and_round_trips(tmp_path, doc_globs):  # noqa: F811
    cfg = tiny_cfg(tmp_path, doc_globs, "train.run_name=ep2", "train.workers=2", "train.dp_size=2",
                   "train.ep_size=2", "train.steps=3", "train.checkpoint_every=3", "train.eval_every=100")
    spawn_local(cfg)
    run = run_dir(cfg)
    result = export_checkpoint(run, tmp_path / "hf", greedy_tokens=8)
    assert result.check.max_abs_logit_diff <= 1e-4 and result.check.greedy_equal
    trained = load_trained_model(run)
    w1 = trained.model.layers[1].ffn.experts.w1_EFD
    half = w1.shape[0] // 2
    assert not torch.equal(w1[:half], w1[half:])  # both ranks' experts, not rank 0's twice
    gate_up = load_hf(tmp_path / "hf").model.layers[1].mlp.experts.gate_up_proj
    b = trained.model.layers[1].ffn.bungee
    assert torch.allclose(gate_up[:, : w1.shape[1]], w1 * b, rtol=0, atol=1e-6)
    imported = load_trained_model(import_hf(tmp_path / "hf", tmp_path / "imported")).model.state_dict()
    original = trained.model.state_dict()
    assert [k for k in original if not torch.equal(original[k], imported[k])] == []

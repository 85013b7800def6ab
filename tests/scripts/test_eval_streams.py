"""scripts/eval_streams.py reproduces the trainer's own eval on the run's stream and scores others."""

from __future__ import annotations

import math
from pydoc_data.topics import topics

import pytest

from scripts import eval_streams
from services.trainer.launch import run_local
from tests.services.trainer.conftest import tiny_cfg, write_docs


@pytest.mark.slow
def test_a_finished_run_is_scored_on_its_own_stream_and_on_another_shuffle(tmp_path):
    texts = [t for _, t in sorted(topics.items()) if len(t) > 200]
    globs = write_docs(tmp_path / "docs" / "train", texts[:-40], "web"), write_docs(tmp_path / "docs" / "eval", texts[-40:], "web")
    cfg = tiny_cfg(tmp_path, globs, "train.steps=4", "train.eval_every=4", "train.checkpoint_every=4", "train.eval_batches=2")
    result = run_local(cfg)
    out = eval_streams.main([str(tmp_path / "runs" / "tiny"), "--batches", "2", "--routing"])
    rows = {(r["seed"], r["batches"]): r for r in out["streams"]}
    # The trainer scores the stream shuffled with seed 0 (whatever the run's seed): same model, same tokens.
    assert rows[(0, 2)]["loss"] == pytest.approx(result["eval/loss"], rel=1e-5)
    assert math.isfinite(rows[(1, 2)]["loss"]) and rows[(1, 2)]["loss"] != rows[(0, 2)]["loss"]
    # One row per MoE layer; a freshly trained router's scores vary across tokens and no expert takes all.
    assert [r["layer"] for r in out["routing"]] == list(range(cfg.model.first_k_dense, cfg.model.n_layers))
    assert all(r["score_std_tokens"] > 1e-3 and r["busiest_expert_share"] < 1.0 for r in out["routing"])
    # The frozen router with either eval bias, on the held-out and the training stream, beside the
    # sampling floor of as many tokens; the trainer's own eval used the run's default (average).
    both = eval_streams.main([str(tmp_path / "runs" / "tiny"), "--seeds", "0", "--batches", "2", "--bias",
                              "live,average", "--train-stream"])
    rows = {(r["stream"], r["bias"]): r for r in both["streams"]}
    assert set(rows) == {(s, b) for s in ("held_out", "train") for b in ("live", "average")}
    assert rows[("held_out", "average")]["maxvio_global"] == pytest.approx(result["eval/maxvio_global"])
    assert all(r["uniform_floor"] > 0 and r["tokens"] == 2 * cfg.train.micro_batch_size * cfg.train.seq_len
               for r in rows.values())
    with pytest.raises(SystemExit, match="unknown choice"):
        eval_streams.main([str(tmp_path / "runs" / "tiny"), "--bias", "ema"])

"""The trainer's eval reports the frozen router under the dashboard's keys (`router_frozen/maxvio_worst`,
`router_frozen/floor`, `router_frozen/maxvio/layer<i>`): the same figures `moelab router frozen`
computes on the same tokens, the same whether one process or two routed them, and logged by a run."""

from __future__ import annotations

import logging
import re
from pydoc_data.topics import topics

import pytest
import torch

from services.trainer import eval_frozen
from services.trainer.eval_frozen import RoutingTap, frozen_router_metrics
from services.trainer.launch import run_local
from services.trainer.loop import run_dir
from services.trainer.metrics import read_metrics
from shared.config import load_config
from shared.model import MoETransformer
from shared.model.router_frozen import Sequences, frozen_stats, record_routing
from tests.services.trainer.conftest import tiny_cfg, write_docs

EOS, V = 0, 64
LAYER_KEY = re.compile(r"^router_frozen/maxvio/(?:layer)?(\d+)$")  # services/tracker/static/run_charts.js


def _model() -> MoETransformer:
    cfg = load_config(None, [f"model.vocab_size={V}", "model.d_model=32", "model.n_layers=3", "model.n_heads=2",
                             "model.n_kv_heads=1", "model.max_seq_len=64", "model.first_k_dense=1",
                             "model.moe.n_routed_experts=8", "model.moe.top_k=2", "model.moe.expert_hidden=16"])
    torch.manual_seed(0)
    return MoETransformer(cfg.model).eval()


def _batches(n_batches: int, rows: int, T: int = 32, seed: int = 1):
    """Random tokens (EOS, 1 in V, cuts documents), two sources alternating by row."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n_batches):
        yield torch.randint(0, V, (rows, T), generator=gen), tuple("ab"[i % 2] for i in range(rows))


def _tap(model, batches) -> RoutingTap:
    with RoutingTap(model) as tap, torch.no_grad():
        for inputs, sources in batches:
            model(inputs)
            tap.batch(inputs, sources)
    return tap


def test_eval_figures_are_the_frozen_measure_of_the_same_tokens():
    model = _model()
    batches = list(_batches(8, rows=4))
    got = frozen_router_metrics(_tap(model, batches), EOS)
    inputs = torch.cat([b[0] for b in batches])
    seqs = Sequences(inputs, inputs, tuple(s for b in batches for s in b[1]))
    want = frozen_stats(model, record_routing(model, seqs, EOS), draws=eval_frozen.FLOOR_DRAWS)
    assert want["documents"] >= eval_frozen.MIN_FLOOR_DOCUMENTS
    assert got["router_frozen/maxvio_worst"] == pytest.approx(want["maxvio_worst"])
    assert got["router_frozen/floor"] == pytest.approx(want["floor_worst"])
    layers = {k: v for k, v in got.items() if LAYER_KEY.match(k)}
    assert layers == pytest.approx({f"router_frozen/maxvio/{k}": v for k, v in want["maxvio"].items()})
    assert set(got) == {"router_frozen/maxvio_worst", "router_frozen/floor", *layers}
    assert 0 < got["router_frozen/floor"] < got["router_frozen/maxvio_worst"]  # an untrained router, far off


def test_two_ranks_give_the_figures_of_one(monkeypatch):
    """Rank r routes global rows r, r + 2, …; gathered and put back in order, the documents and so the
    floor are those one process finds."""
    model = _model()
    batches = list(_batches(6, rows=4))
    one = frozen_router_metrics(_tap(model, batches), EOS)
    ranks = [_tap(model, [(x[r::2], s[r::2]) for x, s in batches]) for r in range(2)]
    gathered = [(t.inputs, t.sources, dict(t.choices)) for t in ranks]
    monkeypatch.setattr(eval_frozen.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(eval_frozen.dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(eval_frozen.dist, "all_gather_object", lambda out, mine: out.__setitem__(slice(None), gathered))
    assert frozen_router_metrics(ranks[0], EOS) == pytest.approx(one)


def test_too_few_documents_leave_the_floor_out_and_say_so(caplog):
    model = _model()
    one_doc = torch.randint(1, V, (2, 32), generator=torch.Generator().manual_seed(3))  # no EOS: one document a source
    with caplog.at_level(logging.WARNING):
        got = frozen_router_metrics(_tap(model, [(one_doc, ("a", "b"))]), EOS)
    assert "router_frozen/floor" not in got and "router_frozen/maxvio_worst" in got
    assert "2 documents" in caplog.text


def test_a_run_logs_the_frozen_router_at_every_eval(tmp_path, doc_globs):
    train, _ = doc_globs
    texts = [t[:160] for _, t in sorted(topics.items()) if len(t) > 200][:96]  # short held-out documents
    held_out = write_docs(tmp_path / "held", texts, "web")
    cfg = tiny_cfg(tmp_path, (train, held_out), "train.eval_batches=4")
    run_local(cfg)
    series = read_metrics(run_dir(cfg) / "metrics.jsonl")
    evals = sorted(series["eval/loss"])
    assert evals == [2, 5]
    layers = sorted(k for k in series if LAYER_KEY.match(k))
    assert layers == [f"router_frozen/maxvio/layer{i}" for i in (1, 2, 3)]  # tiny: layer 0 is dense
    for step in evals:
        worst = series["router_frozen/maxvio_worst"][step]
        assert worst == pytest.approx(series["eval/maxvio_global"][step])  # same tokens, same eval-time bias
        assert worst == max(series[k][step] for k in layers)
        assert 0 < series["router_frozen/floor"][step] < 3.0


def test_a_run_says_once_that_its_eval_is_too_small_for_the_floor(tmp_path, doc_globs, caplog):
    """Every eval routes the same few documents, so the reason the floor is missing is the same at each:
    it is logged at the first eval only, while every eval still logs the frozen MaxVio."""
    cfg = tiny_cfg(tmp_path, doc_globs)  # 1 eval batch of 4 × 64 tokens from 8 long documents
    with caplog.at_level(logging.WARNING, logger="services.trainer.eval_frozen"):
        run_local(cfg)
    series = read_metrics(run_dir(cfg) / "metrics.jsonl")
    assert sorted(series["eval/loss"]) == [2, 5]
    assert sorted(series["router_frozen/maxvio_worst"]) == [2, 5]
    assert "router_frozen/floor" not in series
    said = [r for r in caplog.records if "router_frozen/floor not reported" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]

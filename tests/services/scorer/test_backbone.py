"""The layer-by-layer adapter reproduces the model's own forward, and the cascade stops early."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.scorer.backbone import LayerwiseBackbone
from services.scorer.cascade import CascadeScorer, build_heads
from services.scorer.heads import HEADS_VERSION, Judge, Probe
from services.scorer.sample_docs import python_docs
from services.scorer.windows import WindowReader
from tests.services.scorer.conftest import tiny_gpt_oss


def _layerwise_all(bb: LayerwiseBackbone, ids, am) -> list[torch.Tensor]:
    st = bb.embed(ids, am)
    outs = []
    for i in range(bb.n_layers):
        st = bb.run(st, i + 1)
        outs.append(bb.features(st))
    return outs


def test_minilm_layerwise_equals_model_forward(minilm):
    texts = [d["text"] for d in python_docs(3, 2, seed=5)] + ["short"]
    ids, am = minilm.tokenize(texts, 48)
    ref = minilm.model(input_ids=ids, attention_mask=am, token_type_ids=torch.zeros_like(ids),
                       output_hidden_states=True).hidden_states
    outs = _layerwise_all(minilm, ids, am)
    assert minilm.n_layers == 6 and minilm.width == 384
    for i, h in enumerate(outs):
        torch.testing.assert_close(h[am.bool()], ref[i + 1][am.bool()], rtol=1e-5, atol=1e-5)


def test_tiny_gpt_oss_layerwise_equals_model_forward_with_padding_and_sliding_window():
    model = tiny_gpt_oss()
    bb = LayerwiseBackbone(model)
    ids = torch.randint(0, 512, (3, 12), generator=torch.Generator().manual_seed(1))
    am = torch.ones_like(ids)
    am[1, 8:] = 0
    am[2, 5:] = 0
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=am, output_hidden_states=True).hidden_states
    outs = _layerwise_all(bb, ids, am)
    for i, h in enumerate(outs):
        torch.testing.assert_close(h[am.bool()], ref[i + 1][am.bool()], rtol=1e-5, atol=1e-5)


def test_selected_rows_continue_exactly_as_in_the_full_batch():
    model = tiny_gpt_oss()
    bb = LayerwiseBackbone(model)
    ids = torch.randint(0, 512, (3, 10), generator=torch.Generator().manual_seed(2))
    am = torch.ones_like(ids)
    am[2, 6:] = 0
    full = bb.run(bb.run(bb.embed(ids, am), 2), 4)
    part = bb.run(bb.select(bb.run(bb.embed(ids, am), 2), torch.tensor([2])), 4)
    torch.testing.assert_close(bb.features(part)[0, :6], bb.features(full)[2, :6], rtol=1e-5, atol=1e-5)


def _random_heads(width: int) -> dict:
    torch.manual_seed(0)
    return {"general": (Probe(width, 5).eval(), Judge(width, 5, 32, 1, 4).eval()),
            "code": (Probe(width, 4).eval(), Judge(width, 4, 32, 1, 4).eval())}


def _drop_below_median_margin(sc: CascadeScorer, texts, kinds) -> None:
    """τ_keep 0 for every source and τ_drop at the median Probe margin of each rubric: half drop."""
    probe_only = sc.score(texts, kinds, mode="probe")["probe_quality"]
    sc.tau_keep = {"web": 0.0, "code": 0.0}
    sc.tau_drop = {r: float(np.median([q for q, k in zip(probe_only, kinds, strict=True)
                                       if (k == "code") == (r == "code")])) for r in ("general", "code")}


def test_probe_dropped_documents_never_enter_layers_at_or_after_probe_layer(minilm):
    docs = python_docs(6, 6, seed=4)
    texts, kinds = [d["text"] for d in docs], [d["kind"] for d in docs]
    sc = CascadeScorer(minilm, _random_heads(minilm.width), 4, 6, WindowReader(minilm.tokenizer, 32, 32), micro_batch=5)
    _drop_below_median_margin(sc, texts, kinds)
    minilm.reset_counters()
    res = sc.score(texts, kinds, mode="cascade")
    n_dropped = int(res["judge_skipped"].sum())
    assert 0 < n_dropped < len(docs)
    assert minilm.layer_rows[:4] == [len(docs)] * 4
    assert minilm.layer_rows[4:] == [len(docs) - n_dropped] * 2
    assert not res["keep"][res["judge_skipped"]].any()


def test_a_probe_reading_fewer_windows_leaves_the_rest_of_a_dropped_document_unread(minilm):
    """With probe_windows=1 a dropped document costs one window's first layers; survivors read all
    three windows and get the Judge score they get without the Probe."""
    docs = python_docs(6, 6, seed=4, max_chars=900)
    texts, kinds = [d["text"] for d in docs], [d["kind"] for d in docs]
    reader = WindowReader(minilm.tokenizer, 32, 96, probe_windows=1)
    windows = [len(reader.read([t], [k]).doc) for t, k in zip(texts, kinds, strict=True)]
    sc = CascadeScorer(minilm, _random_heads(minilm.width), 2, 4, reader, micro_batch=7)
    judge_only = sc.score(texts, kinds, mode="judge")["judge_quality"]
    _drop_below_median_margin(sc, texts, kinds)
    minilm.reset_counters()
    res = sc.score(texts, kinds, mode="cascade")
    dropped = res["judge_skipped"]
    kept_windows = sum(w for w, d in zip(windows, dropped, strict=True) if not d)
    assert 0 < dropped.sum() < len(docs) and max(windows) == 3
    assert minilm.layer_rows[:2] == [len(docs) - int(dropped.sum()) + kept_windows] * 2
    assert minilm.layer_rows[2:4] == [kept_windows] * 2 and minilm.layer_rows[4:] == [0, 0]
    np.testing.assert_allclose(res["judge_quality"][~dropped], judge_only[~dropped], rtol=1e-4, atol=1e-5)



def test_documents_the_probe_keeps_skip_the_judge_and_stay_kept(minilm):
    """With τ_drop under the lowest third of Probe margins and τ_accept over the highest third, the
    middle third alone enters layers ≥ L_probe and gets its Judge-only score; the top third is kept
    on the Probe's word (`probe_kept`), the bottom third dropped."""
    docs = python_docs(9, 9, seed=5)
    texts, kinds = [d["text"] for d in docs], [d["kind"] for d in docs]
    sc = CascadeScorer(minilm, _random_heads(minilm.width), 2, 4, WindowReader(minilm.tokenizer, 32, 32), micro_batch=5)
    judge_only = sc.score(texts, kinds, mode="judge")
    probe_q = sc.score(texts, kinds, mode="probe")["probe_quality"]
    bar = float(np.median(judge_only["judge_quality"]))
    sc.tau_keep = {"web": bar, "code": bar}
    rubric = np.array(["code" if k == "code" else "general" for k in kinds])
    margin = probe_q - bar
    sc.tau_drop = {r: float(np.quantile(margin[rubric == r], 1 / 3)) for r in ("general", "code")}
    sc.tau_accept = {r: float(np.quantile(margin[rubric == r], 2 / 3)) for r in ("general", "code")}
    minilm.reset_counters()
    res = sc.score(texts, kinds, mode="cascade")
    accepted, skipped = res["probe_kept"], res["judge_skipped"]
    assert 0 < accepted.sum() < skipped.sum() < len(docs)
    assert (accepted == (margin > np.array([sc.tau_accept[r] for r in rubric]))).all()
    assert res["keep"][accepted].all() and not res["keep"][skipped & ~accepted].any()
    assert minilm.layer_rows[:2] == [len(docs)] * 2 and minilm.layer_rows[2:4] == [len(docs) - int(skipped.sum())] * 2
    np.testing.assert_allclose(res["judge_quality"][~skipped], judge_only["judge_quality"][~skipped], rtol=1e-4, atol=1e-5)
    judged_keep = res["keep"][~skipped]
    assert judged_keep.any() and not judged_keep.all()  # the middle third straddles the bar: the Judge decides
    assert (judged_keep == (judge_only["judge_quality"][~skipped] >= bar)).all()

def test_cascade_never_runs_layers_after_judge_layer(minilm):
    docs = python_docs(3, 0, seed=6)
    sc = CascadeScorer(minilm, _random_heads(minilm.width), 2, 3, WindowReader(minilm.tokenizer, 32, 32))
    minilm.reset_counters()
    sc.score([d["text"] for d in docs], [d["kind"] for d in docs], mode="judge")
    assert minilm.layer_rows[3:] == [0, 0, 0] and minilm.layer_rows[:3] == [3, 3, 3]


def test_heads_of_another_version_fail_with_a_retrain_hint():
    judge = Judge(16, 2, 8, 1, 2).state_dict()
    old = {k: v for k, v in judge.items() if not k.startswith(("skip.", "proj_probe."))}  # a Judge without the skip path
    rubric = {"dims": ["a", "b"], "probe": Probe(16, 2).state_dict(), "judge_cfg": {"dim": 8, "layers": 1, "heads": 2}}
    with pytest.raises(ValueError, match="version-1 heads.*rerun `moelab score train`"):
        build_heads({"rubrics": {"general": {**rubric, "judge": old}}}, 16)  # written before versions existed
    current = {"meta": {"heads_version": HEADS_VERSION}, "rubrics": {"general": {**rubric, "judge": judge}}}
    assert set(build_heads(current, 16)) == {"general"}


@pytest.mark.gpu
def test_minilm_layerwise_on_cuda_bf16_matches_forward_and_is_timed():
    import time

    bb = LayerwiseBackbone.load("minilm", dtype="bfloat16", device="cuda")
    texts = [d["text"] for d in python_docs(64, 64, seed=7)]
    ids, am = bb.tokenize(texts, 256)
    with torch.no_grad():
        ref = bb.model(input_ids=ids, attention_mask=am, token_type_ids=torch.zeros_like(ids),
                       output_hidden_states=True).hidden_states
    outs = _layerwise_all(bb, ids, am)
    for i, h in enumerate(outs):
        torch.testing.assert_close(h[am.bool()].float(), ref[i + 1][am.bool()].float(), rtol=2e-2, atol=2e-2)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        _layerwise_all(bb, ids, am)
    torch.cuda.synchronize()
    per_s = 5 * len(texts) / (time.perf_counter() - t0)
    print(f"minilm bf16 layerwise on {torch.cuda.get_device_name()}: {per_s:.0f} docs/s at 256 tokens")
    assert per_s > 0

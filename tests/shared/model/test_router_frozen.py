"""The frozen measure and post-hoc calibration on a model whose router is fixed (never trained)."""

from __future__ import annotations

import pytest
import torch

from shared.config import load_config
from shared.model import MoETransformer
from shared.model.router_frozen import (
    Sequences,
    calibrate_biases,
    frozen_stats,
    maxvio_at_mix,
    moe_routers,
    record_routing,
)

EOS = 0
V = 64


def _model(*extra: str) -> MoETransformer:
    cfg = load_config(None, [f"model.vocab_size={V}", "model.d_model=32", "model.n_layers=3", "model.n_heads=2",
                             "model.n_kv_heads=1", "model.max_seq_len=64", "model.first_k_dense=1",
                             "model.moe.n_routed_experts=8", "model.moe.top_k=2", "model.moe.expert_hidden=16", *extra])
    torch.manual_seed(0)
    return MoETransformer(cfg.model)


def _sequences(n: int, seed: int, T: int = 32) -> Sequences:
    """Random tokens in n sequences of two sources; EOS (1 in V tokens) cuts documents."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, V, (n, T + 1), generator=gen)
    return Sequences(rows[:, :-1], rows[:, 1:], tuple("ab"[i % 2] for i in range(n)))


@pytest.fixture(scope="module")
def model_and_data():
    model = _model()
    # calibrated on 4× the tokens it is judged on: the calibration's own sampling error stays well
    # under the floor of the judged tokens
    return model, _sequences(1024, seed=1), _sequences(256, seed=2)


def _frozen(model, seqs):
    return frozen_stats(model, record_routing(model, seqs, EOS), draws=200)


@pytest.mark.slow
def test_calibration_brings_a_planted_bias_error_down_to_the_floor(model_and_data):
    model, calib, unseen = model_and_data
    calibrate_biases(model, calib, EOS, iters=150)
    solved = {i: r.expert_bias_avg_E.clone() for i, r in moe_routers(model).items()}
    balanced = _frozen(model, unseen)
    assert balanced["maxvio_worst"] <= 1.5 * balanced["floor_worst"]
    gen = torch.Generator().manual_seed(5)
    for r in moe_routers(model).values():  # plant an error: every expert's bias off by up to ±0.1
        r.expert_bias_avg_E.add_(torch.empty(8).uniform_(-0.1, 0.1, generator=gen))
    planted = _frozen(model, unseen)
    assert planted["maxvio_worst"] > 3 * planted["floor_worst"]
    report = calibrate_biases(model, calib, EOS, iters=150)
    after = _frozen(model, unseen)
    assert after["maxvio_worst"] <= 1.5 * after["floor_worst"], (planted, after)
    assert all(v["maxvio_after"] < v["maxvio_before"] for v in report.values())
    for i, r in moe_routers(model).items():  # the planted error is undone, not swapped for another bias
        assert (r.expert_bias_avg_E - solved[i]).abs().max() < 0.03


def test_frozen_stats_report_the_floor_no_bias_figure_and_sensitivity(model_and_data):
    model, _, unseen = model_and_data
    stats = _frozen(model, unseen)
    assert stats["tokens"] == 256 * 32
    assert set(stats["maxvio"]) == set(stats["floor"]) == {"layer1", "layer2"}
    assert 0 < stats["floor_worst"] < 0.5
    assert stats["ratio_to_floor"] == pytest.approx(stats["maxvio_worst"] / stats["floor_worst"])
    assert all(v > 0 for v in stats["bias_sensitivity"].values())  # raising an expert's bias gives it tokens


def test_a_stream_unbalanced_only_by_its_source_shares_is_balanced_at_the_reference_mix():
    """Source a routes to experts 0-1, source b to 2-3: balanced half and half, not at 3 to 1."""
    loads_BE = torch.tensor([[30.0, 30, 0, 0], [30, 30, 0, 0], [30, 30, 0, 0], [0, 0, 30, 30]])
    sources = ["a", "a", "a", "b"]
    assert maxvio_at_mix(loads_BE, sources, {"a": 0.75, "b": 0.25}) == pytest.approx(0.5)
    assert maxvio_at_mix(loads_BE, sources, {"a": 0.5, "b": 0.5}) == pytest.approx(0.0)
    # a source the reference lacks is left out and the rest renormalised: a alone is 2 of 4 experts
    assert maxvio_at_mix(loads_BE, sources, {"a": 0.2, "c": 0.8}) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no source of the measured tokens"):
        maxvio_at_mix(loads_BE, sources, {"c": 1.0})


def test_frozen_stats_give_the_source_mix_and_the_figure_at_another_streams_mix(model_and_data):
    model, _, unseen = model_and_data
    stats = frozen_stats(model, record_routing(model, unseen, EOS), draws=50, reference_mix={"a": 0.5, "b": 0.5})
    assert stats["source_mix"] == pytest.approx({"a": 0.5, "b": 0.5})  # every other sequence is b's
    # at its own mix the reweighted figure is the measured one
    assert stats["maxvio_at_reference_mix"] == pytest.approx(stats["maxvio"])
    assert stats["reference_mix_missing"] == []
    only_a = frozen_stats(model, record_routing(model, unseen, EOS), draws=50, reference_mix={"a": 1.0})
    assert only_a["reference_mix_missing"] == ["b"]
    assert only_a["maxvio_at_reference_mix_worst"] != pytest.approx(stats["maxvio_worst"])


def test_calibration_changes_only_the_eval_time_bias():
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    seqs = _sequences(32, seed=3)
    _, aux = model(seqs.inputs_NT[:4], seqs.targets_NT[:4])
    aux["lm_loss"].backward()
    opt.step()
    model.update_router_biases()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt_before = {k: {n: t.clone() for n, t in s.items() if torch.is_tensor(t)} for k, s in opt.state_dict()["state"].items()}
    calibrate_biases(model, seqs, EOS, iters=50)
    after = model.state_dict()
    changed = sorted(k for k in before if not torch.equal(before[k], after[k]))
    assert changed and all(k.endswith("router.expert_bias_avg_E") for k in changed)
    for k, s in opt.state_dict()["state"].items():
        for n, t in opt_before[k].items():
            assert torch.equal(s[n], t)
    assert model.training  # the model's mode is restored


def test_calibration_refuses_a_model_that_routes_with_the_live_bias_in_eval():
    model = _model("model.moe.balance.eval_bias=live")
    with pytest.raises(ValueError, match="eval_bias"):
        calibrate_biases(model, _sequences(8, seed=4), EOS)

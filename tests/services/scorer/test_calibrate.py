"""Calibration hits target keep rates on synthetic scores and bounds the cascade's keeper loss."""

from __future__ import annotations

import numpy as np
import pytest

from services.scorer import calibrate as cal
from shared.config import load_config
from shared.config.scorer import ScorerConfig


@pytest.mark.parametrize("dist", ["uniform", "beta", "bimodal"])
@pytest.mark.parametrize("rate", [0.3, 0.5, 0.1, 0.9])
def test_tau_keep_hits_target_keep_rate_within_two_points(dist, rate):
    rng = np.random.default_rng(0)
    draw = {"uniform": lambda n: rng.uniform(size=n), "beta": lambda n: rng.beta(2, 5, size=n),
            "bimodal": lambda n: np.concatenate([rng.normal(0.2, 0.05, n // 2), rng.normal(0.8, 0.05, n - n // 2)])}
    calib, fresh = draw[dist](2000), draw[dist](20000)
    tau = cal.tau_for_keep_rate(calib, rate)
    assert abs(np.mean(calib >= tau) - rate) <= 0.02
    assert abs(np.mean(fresh >= tau) - rate) <= 0.02  # also on unseen scores from the same distribution


def test_tau_drop_loses_at_most_the_allowed_fraction_of_keepers_and_skips_most_rejects():
    rng = np.random.default_rng(1)
    judge = rng.uniform(size=5000)
    probe = judge + rng.normal(0, 0.1, size=judge.size)  # a noisy early-exit estimate
    tau_keep = cal.tau_for_keep_rate(judge, 0.3)
    keepers = judge >= tau_keep
    tau_drop = cal.tau_drop_for_loss(probe[keepers], 0.01)
    loss = np.mean(probe[keepers] < tau_drop)
    assert loss <= 0.01
    assert np.mean(probe < tau_drop) > 0.4  # more than half of the 70% rejects skip the Judge


def test_tau_drop_keeps_its_promise_on_new_documents_not_just_on_the_calibration_keepers():
    """Over many calibration draws the loss of *fresh* keepers averages at most max_loss; the naive
    in-sample rule (lowest keeper score when 1% of n rounds to 0) loses ~1/(n+1) of them."""
    rng = np.random.default_rng(2)
    fresh = rng.normal(size=200_000)
    for n in (150, 400, 1000):
        losses = [np.mean(fresh < cal.tau_drop_for_loss(rng.normal(size=n), 0.01)) for _ in range(300)]
        assert np.mean(losses) <= 0.01 + 0.0015, n
        assert np.mean(losses) == pytest.approx(cal.expected_keeper_loss(n, 0.01), abs=0.0015)
    in_sample = [np.mean(fresh < np.min(rng.normal(size=10))) for _ in range(300)]
    assert np.mean(in_sample) > 0.07  # the naive rule with 10 keepers: ~1/11


def test_tau_drop_without_enough_keepers_skips_nothing():
    assert cal.tau_drop_for_loss(np.array([0.1, 0.5, 0.2, 0.9]), 0.0) == -np.inf
    assert cal.tau_drop_for_loss(np.linspace(0, 1, 98), 0.01) == -np.inf  # 98 keepers: 1/99 > 1%
    assert cal.tau_drop_for_loss(np.linspace(0, 1, 99), 0.01) == 0.0  # 99: skip under the lowest, 1/100
    assert cal.tau_drop_for_loss(np.array([]), 0.01) == -np.inf
    assert cal.expected_keeper_loss(98, 0.01) == 0.0 and cal.expected_keeper_loss(99, 0.01) == pytest.approx(0.01)


def test_keeper_loss_quantile_matches_the_spread_over_calibration_samples():
    rng = np.random.default_rng(4)
    fresh = rng.normal(size=200_000)
    losses = [np.mean(fresh < cal.tau_drop_for_loss(rng.normal(size=110), 0.01)) for _ in range(2000)]
    p90 = cal.expected_keeper_loss(110, 0.01, quantile=0.9)
    assert p90 == pytest.approx(0.0207, abs=5e-4)
    assert np.quantile(losses, 0.9) == pytest.approx(p90, rel=0.1)


def test_confident_tau_drop_keeps_the_promise_in_nine_calibration_samples_of_ten():
    """At confidence 0.9 the keeper loss of one calibration sample exceeds 1% in at most ~10% of samples;
    the in-expectation rule exceeds it about half the time."""
    assert cal.conformal_rank(229, 0.01, 0.9) == 0 and cal.conformal_rank(230, 0.01, 0.9) == 1
    assert cal.expected_keeper_loss(230, 0.01, 0.9, confidence=0.9) <= 0.01
    rng = np.random.default_rng(5)
    fresh = rng.normal(size=200_000)
    over = {conf: np.mean([np.mean(fresh < cal.tau_drop_for_loss(rng.normal(size=600), 0.01, conf)) > 0.01
                           for _ in range(600)]) for conf in (0.0, 0.9)}
    assert over[0.9] <= 0.13 and over[0.0] >= 0.3


def test_fit_thresholds_per_source_with_kind_fallback_and_per_rubric_drop():
    rng = np.random.default_rng(3)
    n = 3000
    sources = np.array(["wiki", "forum", "pycode"])[rng.integers(0, 3, n)]
    kinds = np.where(sources == "pycode", "code", "web")
    rubrics = np.where(kinds == "code", "code", "general")
    judge = rng.uniform(size=n) + (sources == "forum") * 0.5  # forum scores higher: its own τ_keep
    probe = judge + rng.normal(0, 0.1, n)
    rates = {"web": 0.3, "code": 0.5}
    th = cal.fit_thresholds(judge, probe, sources, kinds, rubrics, rates.__getitem__, 0.01)
    for src, kind in (("wiki", "web"), ("forum", "web"), ("pycode", "code")):
        m = sources == src
        assert abs(np.mean(judge[m] >= th.tau_keep[src]) - rates[kind]) <= 0.01
    assert th.tau_keep["forum"] > th.tau_keep["wiki"]
    assert th.keep_threshold("new-web-source", "web") == th.tau_keep["kind:web"]
    assert th.keep_threshold("new", "math") == np.inf  # no kind seen: keep nothing rather than guess
    bar = np.array([th.tau_keep[s] for s in sources])
    keep = judge >= bar
    assert set(th.tau_drop) == {cal.POOLED} and sum(th.keepers_per_rubric.values()) == keep.sum()
    dropped = cal.drop_mask(th, probe, sources, kinds, rubrics)
    assert np.mean(dropped[keep]) <= 0.01 and np.mean(dropped) > 0.4  # one margin for all: the cascade saves work
    for src in ("wiki", "forum"):  # the margin drops a strong source's rejects that score above the weak one's keepers
        m = sources == src
        assert np.mean(dropped[m & ~keep]) > 0.5
    per_rubric = cal.fit_thresholds(judge, probe, sources, kinds, rubrics, rates.__getitem__, 0.01, scope="rubric")
    for rubric in ("general", "code"):
        m = (rubrics == rubric) & keep
        assert per_rubric.keepers_per_rubric[rubric] == m.sum() > 300
        assert np.mean((probe - bar)[m] < per_rubric.tau_drop[rubric]) <= 0.01
    score_only = np.mean(probe[(sources == "forum") & ~keep] < th.tau_keep["wiki"] + th.tau_drop[cal.POOLED])
    assert score_only < 0.2  # what one score threshold under the weak source's keepers would drop of forum's rejects
    assert sum(th.docs_per_source.values()) == n
    with pytest.raises(ValueError, match="zero documents"):
        cal.fit_thresholds(np.array([]), np.array([]), [], [], [], rates.__getitem__, 0.01)


def test_tau_accept_keeps_at_most_the_allowed_fraction_of_new_rejects_in_nine_samples_of_ten():
    """τ_accept is τ_drop's rule from the other side: fitted on the Judge's rejects, a fresh reject
    lands above it with probability j/(n+1), under the promise in nine calibration samples of ten."""
    rng = np.random.default_rng(6)
    fresh = rng.normal(size=200_000)
    assert cal.tau_accept_for_rate(np.linspace(0, 1, 229), 0.01, 0.9) == np.inf  # too few rejects: keep nothing
    assert cal.tau_accept_for_rate(np.linspace(0, 1, 230), 0.01, 0.9) == 1.0  # one rank: above the highest
    assert cal.tau_accept_for_rate(np.array([0.2, 0.7]), 0.0) == np.inf
    rates = [np.mean(fresh > cal.tau_accept_for_rate(rng.normal(size=600), 0.01, 0.9)) for _ in range(600)]
    assert np.mean(np.array(rates) > 0.01) <= 0.13
    assert np.mean(rates) == pytest.approx(cal.expected_keeper_loss(600, 0.01, confidence=0.9), abs=0.0015)


def test_fit_thresholds_accepts_clear_keepers_with_a_bounded_share_of_rejects():
    rng = np.random.default_rng(7)
    n = 4000
    sources = np.array(["wiki", "forum"])[rng.integers(0, 2, n)]
    kinds, rubrics = np.full(n, "web"), np.full(n, "general")
    judge = rng.uniform(size=n) + (sources == "forum") * 0.5
    probe = judge + rng.normal(0, 0.05, n)
    rate = lambda kind: 0.5  # noqa: E731
    off = cal.fit_thresholds(judge, probe, sources, kinds, rubrics, rate, 0.01)
    assert off.tau_accept == {cal.POOLED: np.inf} and not cal.accept_mask(off, probe, sources, kinds, rubrics).any()
    th = cal.fit_thresholds(judge, probe, sources, kinds, rubrics, rate, 0.01, confidence=0.9, max_false_keep=0.01)
    keep = judge >= np.array([th.tau_keep[s] for s in sources])
    assert th.rejects_per_rubric == {"general": int((~keep).sum())}
    accepted = cal.accept_mask(th, probe, sources, kinds, rubrics)
    dropped = cal.drop_mask(th, probe, sources, kinds, rubrics)
    assert not (accepted & dropped).any()
    assert np.mean(accepted[~keep]) <= 0.01 and np.mean(accepted[keep]) > 0.6  # most keepers settle at the Probe
    assert th.accept_threshold("general") == th.accept_threshold("code") == th.tau_accept[cal.POOLED] > 0

def test_f1_and_mae_per_class():
    assert cal.f1(np.array([1, 1, 0], bool), np.array([1, 0, 0], bool)) == pytest.approx(2 / 3)
    mae = cal.mae_per_class(np.array([[0.25], [0.5]]), np.array([[0.25], [0.75]]), 4)
    assert mae == {"1": pytest.approx(0.0), "3": pytest.approx(1.0)}


def test_config_defaults_scale_probe_and_judge_layers():
    cfg = ScorerConfig()
    assert cfg.resolved_layers(24) == (18, 24)  # gpt-oss-20b: Probe at 18, Judge at 24
    assert cfg.resolved_layers(6) == (5, 6)  # MiniLM, proportional
    assert (cfg.calibration.keep_rate("web"), cfg.calibration.keep_rate("code")) == (0.3, 0.5)
    with pytest.raises(ValueError, match="scorer.probe_layer"):
        ScorerConfig(probe_layer=10).resolved_layers(6)


def test_config_rejects_pool_min_above_max_naming_both_fields():
    with pytest.raises(Exception, match="actors_min.*actors_max"):
        load_config(None, ["scorer.scoring.actors_min=3", "scorer.scoring.actors_max=2"])


def test_calibration_sends_one_reliability_diagram_per_rubric_and_head():
    from services.scorer.calibrate_stage import HeldOut, log_reliability, pair_accuracy

    rng = np.random.default_rng(0)
    y = rng.uniform(size=(6, 2))
    h = HeldOut(y, y + 0.01, y - 0.01, y, ["t"] * 6, np.array(["s"] * 6), np.array(["web"] * 6),
                np.array(["a", "a", "b", "b", "c", "c"]), np.array(["", "spam", "", "spam", "", "order"]))
    calls = []

    class Run:
        def log_calibration(self, predicted, observed, name, bins):
            calls.append((name, len(predicted), len(observed)))

    log_reliability(Run(), {"general": h})
    assert calls == [("general/judge", 3, 3), ("general/probe", 3, 3)]  # clean documents only
    acc = pair_accuracy(np.array([0.9, 0.1, 0.2, 0.5, 0.7, 0.7]), h)
    assert acc == {"order": 0.0, "spam": 0.5}  # a tie counts as an error


def test_the_report_gives_every_source_its_target_and_realised_keep_rate_on_clean_held_out_documents():
    from services.scorer.calibrate_stage import Fit, HeldOut, build_report

    cfg = load_config(None)
    rng = np.random.default_rng(0)

    def held(n: int, sources: list[str], kind: str, dims: int) -> HeldOut:
        y = rng.integers(0, 5, size=(n, dims)) / 4
        return HeldOut(y, y + rng.normal(0, 0.2, y.shape), y + rng.normal(0, 0.1, y.shape), y + 0.05, ["t"] * n,
                       np.array(sources)[rng.integers(0, len(sources), n)], np.array([kind] * n),
                       np.array([f"g{i // 2}" for i in range(n)]), np.where(rng.uniform(size=n) < 0.2, "spam", ""))

    held_out = {"general": held(200, ["wiki", "forum"], "web", 5), "code": held(120, ["py"], "code", 4)}
    cat = lambda f: np.concatenate([f(h) for h in held_out.values()])  # noqa: E731
    judge_q, sources, kinds = cat(lambda h: h.judge_q), cat(lambda h: h.sources), cat(lambda h: h.kinds)
    th = cal.fit_thresholds(judge_q, cat(lambda h: h.probe_q), sources, kinds, np.array(["general"] * 200 + ["code"] * 120),
                            cfg.scorer.calibration.keep_rate, 0.05)
    report = build_report(cfg, Fit(th, "test", judge_q, sources, kinds), held_out)
    assert list(report["keep_rate"]) == ["forum", "wiki", "py"]  # rubric order, sources sorted within
    for name, h in held_out.items():
        assert report["rubrics"][name]["n_test"] == h.clean.sum() and report["rubrics"][name]["n_test_degraded"] == (~h.clean).sum()
        for source in set(h.sources.tolist()):
            m = h.clean & (h.sources == source)
            rate = report["keep_rate"][source]
            assert rate["n"] == m.sum() and rate["target"] == cfg.scorer.calibration.keep_rate(h.kinds[0])
            assert rate["realised"] == np.mean(h.judge_q[m] >= th.tau_keep[source])
            assert rate["realised_calibration"] == np.mean(judge_q[sources == source] >= th.tau_keep[source])

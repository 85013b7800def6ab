"""benchmarks/scorer.py --draws: each draw redraws labels, heads, split and unseen documents, and the
counts pool across draws (the measurement itself is the quick benchmark test's)."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("scorer_bench", ROOT / "benchmarks" / "scorer.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    try:
        spec.loader.exec_module(bench)
    finally:
        del sys.modules[spec.name]
    return bench


def _draw(lost, keepers, kept, rejects, flops, held, gain):
    rubric = {"judge": held[0], "probe": held[1], "length_baseline": held[2]}
    return {"keepers_lost": lost, "keepers": keepers, "rejects_kept": kept, "rejects": rejects, "flops_saved": flops,
            "held_out_spearman": {"general": rubric}, "unseen_spearman": {"general": {"judge_minus_probe": gain}}}


def test_pooled_rates_sum_the_draws_counts_and_count_the_draws_where_judge_beats_probe_beats_length():
    bench = _bench()
    pooled = bench.pool_draws([_draw(1, 100, 5, 300, 0.2, (0.8, 0.7, 0.2), 0.01),
                               _draw(0, 120, 1, 280, 0.1, (0.7, 0.75, 0.2), -0.03)])
    assert (pooled["keepers_lost"], pooled["keepers"], pooled["rejects_kept"], pooled["rejects"]) == (1, 220, 6, 580)
    assert pooled["keeper_loss_pooled"] == pytest.approx(1 / 220) and pooled["false_keep_pooled"] == pytest.approx(6 / 580)
    assert pooled["false_keep_pooled"] < pooled["false_keep_pooled_p90"] == pytest.approx(bench.clopper_pearson_upper(6, 580))
    assert pooled["flops_saved_min"] == 0.1 and pooled["flops_saved_mean"] == pytest.approx(0.15)
    assert pooled["judge_over_probe_over_length"] == {"general": "1/2"}  # the second draw's Judge is below its Probe
    assert pooled["unseen_judge_minus_probe"]["general"] == pytest.approx({"mean": -0.01, "min": -0.03, "max": 0.01})


def test_every_draw_redraws_seeds_split_and_output_and_draw_zero_is_the_single_run(monkeypatch, tmp_path):
    bench = _bench()
    from services.scorer import pipeline
    from services.scorer.stage_support import benchmark_recipe

    cfg, _ = benchmark_recipe(str(ROOT / "configs" / "demo.yaml"), [], quick=False)
    cfg.scorer.out_dir = str(tmp_path)
    seeds = (cfg.scorer.heads.seed, cfg.scorer.oracle.seed)
    docs = [{"id": f"d{i}"} for i in range(40)]
    seen = []
    monkeypatch.setattr(pipeline, "label_stage", lambda c, docs: seen.append(("label", c.scorer.oracle.seed, len(docs))))

    def fake_measure(c, pool, held):
        seen.append((c.scorer.heads.seed, c.scorer.oracle.seed, c.scorer.out_dir, [d["id"] for d in held]))
        return _draw(0, 10, 0, 10, 0.2, (0.9, 0.8, 0.1), 0.0) | {k: 0 for k in ("keeper_loss", "false_keep", "probe_kept",
                                                                                   "promised_keeper_loss",
                                                                                   "promised_false_keep")}

    monkeypatch.setattr(bench, "build_and_measure", fake_measure)
    out = bench.measure_draws(cfg, docs, 10, 3)
    runs = [s for s in seen if s[0] != "label"]
    assert [s[:2] for s in runs] == [(seeds[0] + k, seeds[1] + k) for k in range(3)]
    assert len({s[2] for s in runs}) == 3 and all(s[2].startswith(str(tmp_path)) for s in runs)
    single = list(docs)
    random.Random(bench.UNSEEN_SHUFFLE_SEED).shuffle(single)
    assert runs[0][3] == [d["id"] for d in single[:10]] and runs[1][3] != runs[0][3]
    assert [s for s in seen if s[0] == "label"] == [("label", seeds[1] + k, 30) for k in range(3)]
    assert [d["draw"] for d in out["draws"]] == [0, 1, 2] and out["judge_over_probe_over_length"] == {"general": "3/3"}
    assert (cfg.scorer.heads.seed, cfg.scorer.oracle.seed, cfg.scorer.out_dir) == (*seeds, str(tmp_path))

"""The scorer benchmarks run in quick mode and end with the JSON line their reports are built from."""

from __future__ import annotations

import pytest

from tests.benchmark_run import run_benchmark


@pytest.mark.slow
def test_scorer_benchmark_quick_prints_flops_saved_and_keeper_loss():
    last = run_benchmark("scorer.py", "--quick", timeout=1500)
    assert 0.0 <= last["flops_saved"] < 1.0 and 0.0 <= last["keeper_loss"] <= last["keeper_loss_p90"] <= 1.0
    assert 0.0 <= last["false_keep"] <= last["false_keep_p90"] <= 1.0 and last["rejects"] + last["keepers"] == last["docs"]
    assert 0.0 <= last["probe_kept"] <= last["judge_passes_skipped"] <= 1.0
    assert last["ratio"] > 0 and last["actors_1_docs_per_s"] > 0 and last["actors_2_docs_per_s"] > 0
    assert last["machine"]["cpu"] and last["machine"]["threads"] >= 1  # docs/s are this machine's
    unseen = last["unseen_spearman"]  # every unseen document labelled, both rubrics measured with a bootstrap
    assert unseen["unlabelled"] == 0 and {"general", "code"} <= set(unseen)
    assert sum(unseen[r]["n"] for r in ("general", "code")) == last["docs"]
    for r in ("general", "code"):
        lo, hi = unseen[r]["judge_minus_probe_p05_p95"]
        assert lo <= unseen[r]["judge_minus_probe"] <= hi
        assert unseen[r]["judge_minus_probe"] == pytest.approx(unseen[r]["judge"] - unseen[r]["probe"])


@pytest.mark.slow
def test_scorer_pairs_benchmark_quick_reports_accuracy_per_kind_for_every_head():
    last = run_benchmark("scorer_pairs.py", "--quick", timeout=1500)
    kinds = {"order", "spelling", "spam", "truncation", "repetition", "obfuscation", "layout", "uncommented", "renamed"}
    for mode in ("probe", "judge", "cascade", "oracle"):
        assert set(last["accuracy"][mode]) == kinds and all(0 <= v <= 1 for v in last["accuracy"][mode].values())
    assert 0 < last["read_fraction_mean"] <= 1
    assert last["machine"]["cpu"] and "blas" in last["machine"]
    # unseen code: every shipped group is either paired or named missing, each head measured on it
    from services.scorer.shipped_code import SHIPPED_CODE

    assert set(last["unseen_code_sources"]) | set(last["missing_groups"]) == set(SHIPPED_CODE)
    for group in last["unseen_code_sources"]:
        assert set(last["accuracy_by_group"]["judge"][group]) == {"obfuscation", "layout", "uncommented", "renamed"}
    if last["unseen_code_sources"]:
        assert all(0 <= last["unseen_code_obfuscation"][m] <= 1 for m in ("probe", "judge", "cascade", "oracle"))

"""Reading studies back: growth exponents of a coordinate check and the law's handling of edge optima."""

from __future__ import annotations

import math

import pytest

from services.trainer.hparam.coord_check import (
    CoordRecord,
    coord_table,
    growth_exponents,
    hidden_matrix_exponents,
    summary_by_step,
    summary_table,
)
from services.trainer.hparam.lr_law import fit_lr_law, law_report
from services.trainer.hparam.sweep import TrialResult


def test_growth_exponent_is_the_log_log_slope_over_width():
    records = [CoordRecord(mup, w, 3, "dWx/layers.0.attn.wq.weight", (1.0 if mup else 0.01 * w), "adamw", "hidden")
               for mup in (True, False) for w in (32, 64, 128)]
    slopes = growth_exponents(records)
    assert slopes[("adamw", True, "dWx/layers.0.attn.wq.weight")] == pytest.approx(0.0, abs=1e-12)
    assert slopes[("adamw", False, "dWx/layers.0.attn.wq.weight")] == pytest.approx(1.0)
    assert hidden_matrix_exponents(records) == slopes
    table = coord_table(records)
    assert "| adamw | SP | dWx/layers.0.attn.wq.weight | hidden | 0.32 | 0.64 | 1.28 | +1.00 |" in table
    assert "| adamw | SP | 1 | +1.00 | +1.00 | +1.00 |" in summary_table(records)


def test_step_table_shows_each_steps_worst_exponent():
    # step 1 flat; at step 2 one of the two matrices falls as width^-0.2
    records = [CoordRecord(True, w, step, f"dWx/layers.0.attn.{m}.weight",
                           1.0 if step == 1 or m == "wq" else w ** -0.2, "adamw", "hidden")
               for step in (1, 2) for w in (32, 64, 128) for m in ("wq", "wk")]
    table = summary_by_step(records).splitlines()
    assert table[2] == "| adamw | muP | 1 | +0.00 | +0.00 | +0.00 |"
    assert table[3] == "| adamw | muP | 2 | -0.20 | -0.10 | +0.00 |"
    assert summary_table(records).splitlines()[2] == "| adamw | muP | 2 | -0.20 | -0.10 | +0.00 |"


def test_only_hidden_matrices_count_for_the_claim():
    records = [CoordRecord(True, w, 1, "dWx/layers.1.ffn.router.weight_ED", 0.01 * w, "adamw", "output")
               for w in (32, 64)]
    assert hidden_matrix_exponents(records) == {}


def _results(optimum_for_tokens, lrs, budgets):
    out = []
    for t in budgets:
        for lr in lrs:
            loss = 3.0 + 0.3 * math.log(lr / optimum_for_tokens(t)) ** 2
            out.append(TrialResult(f"{t}-{lr}", 32, True, lr, t, 10, loss, loss, loss, False))
    return out


def test_law_fits_bracketed_budgets_and_reports_edge_ones():
    lrs = [1e-3 * 2**k for k in range(8)]  # 1e-3 .. 0.128
    law_opt = lambda t: math.exp(2.0 - 0.5 * math.log(t))  # noqa: E731
    results = _results(law_opt, lrs, [4e4, 1.6e5, 6.4e5, 2.56e6])  # the first budget's optimum (0.037)…
    results += _results(lambda t: 1.0, lrs, [1e4])  # …and one whose optimum lies beyond the grid
    law = fit_lr_law(results, width=32, mup=True)
    assert [t for t, _ in law.excluded] == [1e4]
    assert law.fit.b == pytest.approx(-0.5, abs=1e-6) and law.fit.r2 == pytest.approx(1.0)
    report = law_report(law, 1e9)
    assert "R² = 1.000" in report and "excluded" in report and f"{law_opt(1e9):.4g}" in report


def test_law_needs_two_located_optima():
    lrs = [1e-3, 2e-3, 4e-3]
    results = _results(lambda t: 1.0, lrs, [1e4, 2e4])
    with pytest.raises(ValueError, match="Widen --lrs"):
        fit_lr_law(results, width=32, mup=True)


def test_holdout_check_compares_the_prediction_with_a_sweep_outside_the_fit():
    from services.trainer.hparam.lr_law import holdout_check

    lrs = [1e-3 * 2**k for k in range(8)]
    law_opt = lambda t: math.exp(2.0 - 0.5 * math.log(t))  # noqa: E731
    jitter = {4e4: 1.1, 8e4: 0.9, 1.6e5: 1.05}  # optima scattered around the law, so its interval has a width
    law = fit_lr_law(_results(lambda t: law_opt(t) * jitter[t], lrs, list(jitter)), width=32, mup=True)
    predicted = law.fit.predict(6.4e5)[0]
    held = _results(law_opt, [*lrs, predicted], [6.4e5])
    check = holdout_check(law, held, 640_000, 32, True)
    assert check.measured.lr == pytest.approx(law_opt(6.4e5), rel=0.05)
    assert check.loss_lost == pytest.approx(0.0, abs=1e-9) and "inside" in check.report()
    with pytest.raises(ValueError, match="in the fit"):
        holdout_check(law, held, 40_000, 32, True)
    with pytest.raises(ValueError, match="no run at the predicted LR"):
        holdout_check(law, _results(law_opt, lrs, [6.4e5]), 640_000, 32, True)

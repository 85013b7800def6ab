"""Browser tests of the pages that bring runs together: compare (any number of keys, run groups),
a pipeline's stage list and timeline, every funnel and reliability diagram, and a read-protected
server that shows nothing before a login and keeps no token in the page."""

from __future__ import annotations

import httpx

from tests.services.tracker.browser import ARTIFACTS, STAGES, open_page
from tests.services.tracker.helpers import ServerThread


def test_compare_of_two_runs_with_more_than_32_keys_renders_every_chart_below_the_config_diff(dashboard, page):
    url, ids = dashboard
    keys = httpx.get(f"{url}/api/runs/{ids['bf16']}/keys").json()["scalars"]
    series = sorted(k["key"] for k in keys if k["points"] > 1)
    assert len(keys) > 32
    open_page(page, f"{url}/compare?runs={ids['bf16']}&runs={ids['fp8']}", 30000)
    drawn = page.evaluate("Object.keys(window.__tracker.charts).filter(k => !k.startsWith('calibration'))")
    assert sorted(drawn) == series
    for key in series:  # x + one line per run, both with points
        lens = page.evaluate(f"window.__tracker.charts[{key!r}].data.slice(1).map(ys => ys.filter(v => v !== undefined).length)")
        assert len(lens) == 2 and min(lens) > 0, key
    assert page.locator("#compare-layers [data-prefix='grad_norm'] .card").count() == 8  # per-layer keys grouped
    diff = page.locator("#config-diff").inner_text()
    assert "model.precision" in diff and '"fp8"' in diff and "optim.lr" not in diff
    above = page.evaluate("document.querySelector('#config-diff').compareDocumentPosition(document.querySelector('#compare-charts'))")
    assert above & 4, "the config diff comes before the charts"
    assert "final/params" in page.locator("#compare-summary-table").inner_text()
    page.screenshot(path=str(ARTIFACTS / "compare.png"), full_page=True)
    page.select_option("#x-axis", "wall")
    assert page.evaluate("window.__tracker.charts['loss'].axes[0].label") == "seconds since start"
    assert not page.errors


def test_run_groups_draw_a_mean_line_and_a_min_max_band(dashboard, page):
    url, ids = dashboard
    open_page(page, f"{url}/compare?runs={ids['bf16']}&runs={ids['fp8']}&runs={ids['fp8b']}", 30000)
    page.select_option("#group-by", "config:model.precision")
    labels = page.evaluate("window.__tracker.charts['loss'].series.map(s => s.label)")
    assert labels[1:] == ['model.precision = "bf16" (mean of 1)', 'model.precision = "fp8" (mean of 2)',
                          'model.precision = "fp8" max', 'model.precision = "fp8" min']
    assert page.evaluate("window.__tracker.charts['loss'].bands.length") == 1
    mean, hi, lo = page.evaluate("window.__tracker.charts['loss'].data.slice(2, 5).map(ys => ys[10])")
    assert lo < mean < hi
    page.screenshot(path=str(ARTIFACTS / "compare_groups.png"), full_page=True)
    assert not page.errors


def test_a_pipeline_page_lists_its_7_stage_runs_with_status_duration_figures_and_a_timeline(dashboard, page):
    url, ids = dashboard
    open_page(page, f"{url}/runs/{ids['pipeline']}", 15000)
    rows = page.locator("#stages tr.stage-row")
    assert rows.count() == 7
    assert [rows.nth(i).locator("td").first.inner_text() for i in range(7)] == [f"demo-{s}" for s in STAGES]
    for i in range(7):
        row = rows.nth(i)
        assert row.locator(".status").inner_text() == "finished"
        assert row.locator(".duration").inner_text() not in ("", "0 s", "0.0 s")
        assert "records 240" in row.locator(".figures").inner_text()
    assert page.locator("#timeline .tl-bar").count() == 7
    assert "demo-data-filter" in rows.nth(0).inner_text()  # a stage links to its report runs
    page.screenshot(path=str(ARTIFACTS / "pipeline.png"), full_page=True)
    # and the report run links back up: pipeline › stage › run
    open_page(page, f"{url}/runs/{ids['filter_detail']}", 15000)
    assert page.locator("#lineage a").all_inner_texts() == ["pipeline demo-pipeline", "demo-filter"]
    assert not page.errors


def test_every_funnel_and_the_scorers_reliability_diagrams_are_drawn(dashboard, page):
    url, ids = dashboard
    open_page(page, f"{url}/runs/{ids['filter_detail']}", 15000)
    assert page.locator(".funnel[data-name='documents'] .funnel-row").count() == 4
    sources = page.locator(".funnel-matrix th[data-name]").all_text_contents()
    assert sorted(sources) == ["python", "sympy", "sympy_physics", "wiki"]
    page.screenshot(path=str(ARTIFACTS / "funnels.png"), full_page=True)
    open_page(page, f"{url}/runs/{ids['calibrate_detail']}", 15000)
    for rubric in ("helpfulness", "correctness"):
        chart = f"calibration:{rubric}"
        assert page.evaluate(f"window.__tracker.charts[{chart!r}].data[1].filter(v => v != null).length") == 10
        assert page.evaluate(f"window.__tracker.charts[{chart!r}].axes[0].label") == "mean predicted score"
    assert "ECE" in page.locator("#calibration").inner_text()
    page.screenshot(path=str(ARTIFACTS / "calibration.png"), full_page=True)
    assert not page.errors


def test_a_read_protected_dashboard_shows_nothing_before_login_and_keeps_no_token(tmp_path, page):
    from services.tracker.app import create_app
    from services.tracker.store import Store

    store = Store(f"sqlite:///{tmp_path}/tracker.db")
    write, read = store.create_token("w"), store.create_token("r", scope="read")
    srv = ServerThread(lambda: create_app(store=store, read_protected=True)).start()
    try:
        h = {"authorization": f"Bearer {write}"}
        httpx.post(f"{srv.url}/api/runs", json={"id": "s1", "name": "top-secret-ablation"}, headers=h).raise_for_status()
        page.goto(f"{srv.url}/runs/s1")
        page.wait_for_selector("#login-form", timeout=15000)
        assert "top-secret" not in page.content() and "top-secret" not in page.title()
        page.fill("#login-token", read)
        page.click("#login-form button")
        page.wait_for_selector("body[data-ready='1']", timeout=15000)
        assert page.locator("#run-name").inner_text().startswith("top-secret-ablation")
        assert page.evaluate("JSON.stringify(Object.assign({}, localStorage)) + JSON.stringify(Object.assign({}, sessionStorage))") == "{}{}"
        assert "moelab_session" not in page.evaluate("document.cookie")  # HttpOnly: scripts cannot read it
        assert read not in page.content() and read not in page.url
    finally:
        page.context.clear_cookies()
        srv.stop()
        store.engine.dispose()

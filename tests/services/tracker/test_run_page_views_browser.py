"""Browser tests (Debian's Chromium via Playwright) for the run page's views: its series read in one
request, tokens as an x-axis, custom panels overlaying any keys, system metrics on wall time, live
refreshes that update charts in place, log-y tick labels, UTC times, step-0 figures, and the
expert-load heatmap's fixed colour scale with its colour bar."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.services.tracker.browser import open_page
from tests.services.tracker.helpers import live_tracker


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tracker-views")
    with live_tracker(tmp) as srv:
        token = srv.token
        c = httpx.Client(base_url=srv.url, headers={"authorization": f"Bearer {token}"})
        c.post("/api/runs", json={"id": "live", "project": "views", "name": "live-run", "created": 1.7e9}).raise_for_status()

        def log(metrics, steps, hist=None):
            body = {"batch_id": uuid.uuid4().hex, "metrics": {
                k: {"steps": list(steps), "walls": [1.7e9 + s for s in steps], "values": [f(s) for s in steps]}
                for k, f in metrics.items()}}
            if hist:
                body["histograms"] = hist
            c.post("/api/runs/live/batch", json=body).raise_for_status()

        log({"loss": lambda s: 4 - s / 100, "eval/loss": lambda s: 4.2 - s / 100, "tokens": lambda s: (s + 1) * 1000.0,
             "lr": lambda s: 1e-3 * (s + 1) / 100}, range(100))
        log({"system/cpu_percent": lambda s: 50.0 + s}, range(5))
        log({"records": lambda s: 240.0}, [0])
        log({"final/eval_loss": lambda s: 3.1}, [7])
        balanced = [{"key": "router/load/layer0", "step": s, "wall": 1.7e9 + s, "values": [100.0] * 8, "edges": None}
                    for s in range(0, 100, 10)]
        log({}, [], hist=balanced)
        long_event = {"kind": "warning", "message": "x" * 60_000, "data": {"note": "y" * 5000}, "step": 3, "wall": 1.7e9 + 3}
        c.post("/api/runs/live/batch", json={"batch_id": uuid.uuid4().hex, "events": [long_event]}).raise_for_status()
        yield srv.url, log
        c.close()


def _chart(page, chart_id, expr):
    return page.evaluate(f"(() => {{ const u = window.__tracker.charts[{chart_id!r}]; return {expr}; }})()")


def test_the_page_reads_all_its_series_in_one_request(site, page):
    url, _ = site
    seen = []

    def keep(req):
        if "/series" in req.url or "/api/compare" in req.url:
            seen.append(req.url)

    page.on("request", keep)
    try:
        open_page(page, f"{url}/runs/live")
    finally:
        page.remove_listener("request", keep)
    assert len(seen) == 1 and "/api/compare" in seen[0], seen
    assert _chart(page, "loss", "u.data[1].length") == 100
    assert not page.errors


def test_tokens_are_an_x_axis(site, page):
    url, _ = site
    open_page(page, f"{url}/runs/live")
    page.select_option("#x-axis", "tokens")
    assert _chart(page, "loss", "u.axes[0].label") == "tokens"
    assert _chart(page, "loss", "[u.data[0][0], u.data[0][99]]") == [1000, 100_000]
    assert "x=tokens" in page.url
    assert not page.errors


def test_a_custom_panel_overlays_train_and_eval_loss_and_is_kept_in_the_url(site, page):
    url, _ = site
    open_page(page, f"{url}/runs/live")
    page.fill("#panel-keys", "loss, eval/loss")
    page.click("#add-panel")
    pid = "panel:loss+eval/loss"
    assert _chart(page, pid, "u.series.slice(1).map(s => s.label)") == ["loss", "eval/loss"]
    assert _chart(page, pid, "u.data[2][50]") == pytest.approx(3.7)
    assert "panel=loss%2Ceval%2Floss" in page.url
    open_page(page, page.url)
    assert page.evaluate(f"!!window.__tracker.charts[{pid!r}]")
    page.locator(f"[data-key='{pid}'] .panel-remove").click()
    assert "panel=" not in page.url
    assert not page.errors


def test_system_metrics_are_drawn_on_wall_time_in_their_own_section(site, page):
    url, _ = site
    open_page(page, f"{url}/runs/live")
    assert page.locator("#charts-system [data-key='system/cpu_percent']").count() == 1
    assert _chart(page, "system/cpu_percent", "u.axes[0].label") == "seconds since start"
    assert not page.errors


def test_log_y_ticks_are_labelled_and_times_say_utc(site, page):
    url, _ = site
    open_page(page, f"{url}/runs/live")
    page.check("input.log-toggle[data-chart='lr']")
    labels = _chart(page, "lr", "u.axes[1]._values")
    assert labels and "—" not in labels and any(v for v in labels), labels
    assert "UTC" in page.locator("#run-meta").inner_text()
    assert not page.errors


def test_a_stage_figure_at_step_0_is_not_labelled_with_its_step(site, page):
    url, _ = site
    open_page(page, f"{url}/runs/live")
    assert "step" not in page.locator("#summary-table tr[data-key='records']").inner_text()
    assert "at step 7" in page.locator("#summary-table tr[data-key='final/eval_loss']").inner_text()
    assert not page.errors


def test_a_balanced_router_sits_at_the_middle_of_a_fixed_colour_scale_with_a_colour_bar(site, page):
    url, _ = site
    open_page(page, f"{url}/runs/live")
    rgb = page.evaluate("""(() => { const c = document.querySelector("canvas.heatmap[data-key='router/load/layer0']");
        return Array.from(c.getContext('2d').getImageData(3, 2, 1, 1).data.slice(0, 3)); })()""")
    assert rgb == [33, 145, 140], rgb  # the ramp's middle stop: share = 1/E
    legend = page.locator("#hm-router\\/load\\/layer0 .hm-legend").inner_text()
    assert "12.5% = fair share (1/8)" in legend and "2× fair" in legend
    assert "expert 7" in page.locator("#hm-router\\/load\\/layer0 .hm-yaxis").inner_text()
    assert not page.errors


def test_a_live_refresh_updates_the_chart_in_place_and_keeps_the_readout(site, page):
    url, log = site
    open_page(page, f"{url}/runs/live?refresh=600")
    page.evaluate("window.__tracker.charts['loss'].__kept = true")
    before = page.evaluate("""(() => { const u = window.__tracker.charts['loss'];
        u.setCursor({ left: u.valToPos(50, 'x'), top: 10 }); return u.readout.textContent; })()""")
    assert before.startswith("step 50")
    log({"loss": lambda s: 3.0}, range(100, 120))
    page.wait_for_function("window.__tracker.charts['loss'].data[0].length === 120", timeout=15000)
    assert _chart(page, "loss", "u.__kept") is True  # the same chart, not a rebuilt one
    assert _chart(page, "loss", "u.readout.textContent").startswith("step ")
    assert not page.errors


def test_a_60k_character_event_message_wraps_inside_the_page(site, page):
    url, _ = site
    open_page(page, f"{url}/runs/live")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1400, width  # the viewport's width: the message wraps instead of widening the page
    assert len(page.locator("#events td.event-message").first.inner_text()) == 60_000  # and is shown whole
    assert not page.errors

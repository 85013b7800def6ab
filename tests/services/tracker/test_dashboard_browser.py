"""Browser tests: Debian's Chromium, driven by Playwright, renders the run list and run pages from a
live tracker, and a researcher can read them: values on hover, units, log scale, event messages,
NaN marks, zoom that refetches detail. Screenshots go to test-artifacts/tracker/ (gitignored)."""

from __future__ import annotations

from tests.services.tracker.browser import ARTIFACTS, NAN_STEP, inked, open_page


def _chart(page, chart_id, expr):
    return page.evaluate(f"(() => {{ const u = window.__tracker.charts[{chart_id!r}]; return {expr}; }})()")


def test_run_list_shows_runs_and_renders_a_script_name_as_text(dashboard, page):
    url, ids = dashboard
    open_page(page, url + "/", 15000)
    names = page.locator("a.run-name").all_inner_texts()
    assert "<script>window.__pwned=1</script>moe-bf16" in names
    assert "moe-fp8" in names
    assert page.evaluate("window.__pwned") is None
    page.screenshot(path=str(ARTIFACTS / "run_list.png"), full_page=True)
    page.fill("#f-tag", "fp8")
    page.wait_for_function("document.querySelectorAll('#runs tr[data-run]').length === 1", timeout=10000)
    assert page.locator("a.run-name").all_inner_texts() == ["moe-fp8"]
    assert not page.errors


def test_run_page_draws_the_loss_chart_and_expert_heatmap(dashboard, page):
    url, ids = dashboard
    open_page(page, f"{url}/runs/{ids['bf16']}", 15000)
    assert page.locator("#run-name").inner_text().startswith("<script>window.__pwned=1</script>moe-bf16")
    assert page.evaluate("window.__pwned") is None
    assert _chart(page, "loss", "u.data[1].filter(v => v !== null).length") == 300
    assert inked(page, "#card-loss canvas") > 500
    for key in ("lr", "tokens_per_s", "mfu", "eval/loss", "router/maxvio", "router/dead_experts"):
        assert page.evaluate(f"!!window.__tracker.charts['{key}']"), key
    # per-layer keys share one chart per prefix: x + one line per layer
    assert _chart(page, "layers:router/maxvio", "u.series.length") == 3
    assert _chart(page, "layers:grad_norm", "u.series.length") == 9
    cells = page.locator("canvas.heatmap[data-key='router/load/layer1']").get_attribute("data-cells")
    assert int(cells) == 30 * 8
    assert page.locator("#funnels .funnel-row").count() == 4
    assert page.evaluate("!!window.__tracker.charts['calibration:helpfulness']")
    assert "expert 3 dead" in page.locator("#events").inner_text()
    assert '"precision": "bf16"' in page.locator("#config").inner_text()
    # values logged once are a summary table, not one-point charts
    summary = page.locator("#summary-table").inner_text()
    assert "final/params" in summary and "485,443" in summary
    assert page.locator("[data-key='final/params'].card").count() == 0
    page.screenshot(path=str(ARTIFACTS / "run_page.png"), full_page=True)
    page.locator("canvas.heatmap").first.screenshot(path=str(ARTIFACTS / "expert_heatmap.png"))
    page.select_option("#x-axis", "wall")
    page.fill("#smoothing", "0.9")
    page.dispatch_event("#smoothing", "input")
    assert _chart(page, "loss", "u.data[1].filter(v => v !== null).length") == 300
    assert not page.errors


def test_charts_show_values_on_hover_units_events_and_a_log_scale(dashboard, page):
    url, ids = dashboard
    open_page(page, f"{url}/runs/{ids['fp8']}", 15000)
    assert _chart(page, "loss", "u.axes[1].label") == "loss (nats/token)"
    assert _chart(page, "tokens_per_s", "u.axes[1].label") == "tokens/s"
    assert _chart(page, "loss", "u.axes[0].label") == "step"
    over = page.locator("#card-loss .u-over")
    box = over.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.25, box["y"] + box["height"] / 2)
    readout = page.locator("#card-loss .readout").inner_text()
    assert readout.startswith("step ") and "loss " in readout  # a single-line chart shows its value
    x_event = _chart(page, "loss", "u.valToPos(100, 'x')")
    page.mouse.move(box["x"] + x_event, box["y"] + box["height"] / 2)
    assert "router_health: expert 3 dead for 100 steps" in page.locator("#card-loss .readout").inner_text()
    page.check("input.log-toggle[data-chart='loss']")
    assert _chart(page, "loss", "u.scales.y.distr") == 3
    assert not page.errors


def test_zoom_is_linked_across_the_page_and_double_click_resets_it(dashboard, page):
    url, ids = dashboard
    open_page(page, f"{url}/runs/{ids['fp8']}", 15000)
    box = page.locator("#card-loss .u-over").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.2, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=4)
    page.mouse.up()
    lo, hi = _chart(page, "loss", "[u.scales.x.min, u.scales.x.max]")
    assert 40 < lo < 80 and 130 < hi < 170
    assert _chart(page, "lr", "[u.scales.x.min, u.scales.x.max]") == [lo, hi]  # every chart follows
    assert _chart(page, "layers:grad_norm", "[u.scales.x.min, u.scales.x.max]") == [lo, hi]
    page.dblclick("#card-lr .u-over")
    page.wait_for_function("window.__tracker.charts['loss'].scales.x.max > 290", timeout=10000)
    assert not page.errors


def test_a_nan_in_a_million_point_series_is_a_visible_gap_and_a_zoom_refetches_full_resolution(dashboard, page):
    url, ids = dashboard
    open_page(page, f"{url}/runs/{ids['million']}", 20000)
    n, nan_at, marks = _chart(page, "loss", """[u.data[0].length, u.data[0][u.data[1].indexOf(null)],
        u.spec.gaps.map(g => g.x)]""")
    assert n <= 2000 and nan_at == NAN_STEP and marks == [NAN_STEP]
    # the red gap mark is drawn at the NaN's column
    red = page.evaluate(f"""(() => {{ const u = window.__tracker.charts['loss'];
        const x = Math.round(u.valToPos({NAN_STEP}, 'x', true)); const c = u.ctx;
        const y = Math.round(u.bbox.top + u.bbox.height - 3); const d = c.getImageData(x - 1, y, 3, 1).data;
        return [d[0], d[1], d[2]]; }})()""")
    assert red[0] > 180 and red[1] < 90 and red[2] < 90, red
    assert "1 NaN/Inf" in page.locator("#card-loss .card-note").inner_text()
    page.screenshot(path=str(ARTIFACTS / "million_with_nan.png"))
    page.evaluate(f"window.__tracker.charts['loss'].spec.zoom.set({NAN_STEP - 500}, {NAN_STEP + 500})")
    page.wait_for_function("document.body.dataset.zoomed === '1'", timeout=15000)
    n, nulls, lo, hi = _chart(page, "loss", "[u.data[0].length, u.data[1].filter(v => v === null).length, u.data[0][0], u.data[0][u.data[0].length - 1]]")
    assert n == 1001 and nulls == 1 and lo == NAN_STEP - 500 and hi == NAN_STEP + 500  # every point of the window
    page.screenshot(path=str(ARTIFACTS / "million_zoomed.png"))
    assert not page.errors

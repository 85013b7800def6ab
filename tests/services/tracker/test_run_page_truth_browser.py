"""Browser tests (Debian's Chromium via Playwright) for what the run page must not hide: events
past the first page, the raw series under a smoothed one (and both values in the readout), view
settings kept in the URL, and run groups by a config key whose name holds a dot."""

from __future__ import annotations

import pytest

from tests.services.tracker.browser import open_page
from tests.services.tracker.helpers import live_tracker

LOSS = [5.0 + ((s * 7919) % 13) / 10 - s / 100 for s in range(200)]  # jagged: smoothing moves it visibly


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from shared import tracking

    tmp = tmp_path_factory.mktemp("tracker-truth")
    with live_tracker(tmp) as srv:
        token = srv.token
        common = dict(project="truth", url=srv.url, token=token, spool_dir=str(tmp / "spool"), flush_interval=0.05)
        ids = {}
        run = tracking.init(name="many-events", **common)
        for step in range(1200):
            run.log({"router/maxvio": 0.1}, step=step)
            run.event("router_health", f"warning {step}", step=step)
        run.log_funnel({"raw": 100, "kept": 60}, name="documents")
        run.log_calibration([i / 10 for i in range(40)], [i / 10 for i in range(40)], name="helpfulness")
        ids["events"] = run.id
        assert run.finish().complete
        run = tracking.init(name="more-than-a-page", **common)
        for step in range(2500):
            run.event("note", f"n{step}", step=step)
        run.log({"loss": 1.0}, step=0)
        run.log({"loss": 0.5}, step=1)
        ids["paged"] = run.id
        assert run.finish().complete
        run = tracking.init(name="smooth", **common)
        for step, v in enumerate(LOSS):
            run.log({"loss": v}, step=step)
        ids["smooth"] = run.id
        assert run.finish().complete
        yield srv.url, ids


def test_events_past_the_first_thousand_are_shown_and_funnels_survive_them(site, page):
    url, ids = site
    open_page(page, f"{url}/runs/{ids['events']}")
    assert page.locator("#events tr").count() == 1 + 1200
    assert page.locator("#events-count").inner_text() == "all 1,200 events"
    assert page.locator("#funnels .funnel-row").count() == 2
    assert page.evaluate("!!window.__tracker.charts['calibration:helpfulness']")
    # event marks reach the last step, not 999
    assert page.evaluate("Math.max(...window.__tracker.charts['router/maxvio'].spec.events().map(e => e.x))") == 1199
    assert not page.errors


def test_a_cut_event_list_says_how_much_is_missing_and_loads_the_rest(site, page):
    url, ids = site
    open_page(page, f"{url}/runs/{ids['paged']}")
    note = page.locator("#events-count").inner_text()
    assert "first 2,000 of 2,500 events" in note and "500 not loaded" in note
    page.click("#events-more")
    page.wait_for_function("document.querySelectorAll('#events tr').length === 2501", timeout=10000)
    assert page.locator("#events-count").inner_text() == "all 2,500 events"
    assert not page.errors


def _readout_at(page, chart_id, x):
    return page.evaluate(f"""(() => {{ const u = window.__tracker.charts[{chart_id!r}];
        u.setCursor({{ left: u.valToPos({x}, 'x'), top: 10 }}); return u.readout.textContent; }})()""")


def test_smoothing_keeps_the_raw_series_and_the_readout_shows_both_values(site, page):
    url, ids = site
    open_page(page, f"{url}/runs/{ids['smooth']}?smoothing=0.9")
    labels = page.evaluate("window.__tracker.charts['loss'].series.slice(1).map(s => s.label)")
    assert labels == ["loss raw", "loss smoothed 0.9"]
    raw = page.evaluate("window.__tracker.charts['loss'].data[1]")
    assert raw == pytest.approx(LOSS)
    smoothed = page.evaluate("window.__tracker.charts['loss'].data[2]")
    assert abs(smoothed[199] - LOSS[199]) > 0.05  # the smoothed line really differs at the end
    text = _readout_at(page, "loss", 199)
    assert f"loss raw {LOSS[199]:.4g}"[:14] in text and "loss smoothed 0.9" in text
    assert not page.errors


def test_view_settings_are_kept_in_the_url(site, page):
    url, ids = site
    open_page(page, f"{url}/runs/{ids['smooth']}")
    page.fill("#smoothing", "0.5")
    page.dispatch_event("#smoothing", "input")
    page.select_option("#x-axis", "wall")
    assert "smoothing=0.5" in page.url and "x=wall" in page.url
    open_page(page, page.url)
    assert page.input_value("#smoothing") == "0.5" and page.input_value("#x-axis") == "wall"
    assert page.evaluate("window.__tracker.charts['loss'].series.length") == 3


def test_group_by_a_config_key_with_a_dot_keeps_different_values_apart(site, page):
    url, ids = site
    open_page(page, f"{url}/compare?runs={ids['smooth']}")
    groups = page.evaluate("""(() => { const runs = [
        { name: 'a', tags: [], config: { 'lr_x0.1': 1 } }, { name: 'b', tags: [], config: { 'lr_x0.1': 2 } }];
        return [...groupRuns(runs, 'config:lr_x0\\\\.1').keys()]; })()""")
    assert groups == ["lr_x0\\.1 = 1", "lr_x0\\.1 = 2"]

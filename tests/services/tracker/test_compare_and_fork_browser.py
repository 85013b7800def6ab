"""Browser tests (Debian's Chromium via Playwright): the compare readout names every run when runs
log at different steps or on the wall-time axis, a run with a single point is drawn, a zoom refetches
each run's points in range at full resolution on the step, wall-time and tokens axes, and a forked
run's page names the run and step it started from."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.services.tracker.browser import open_page
from tests.services.tracker.helpers import live_tracker

LONG = 4000  # steps of the long runs


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from shared import tracking

    tmp = tmp_path_factory.mktemp("tracker-compare")
    with live_tracker(tmp) as srv:
        token = srv.token
        common = dict(project="cmp", url=srv.url, token=token, spool_dir=str(tmp / "spool"), flush_interval=0.05)
        ids = {}
        for name, steps in (("even", range(0, 100, 2)), ("odd", range(1, 100, 2))):
            run = tracking.init(name=name, **common)
            for step in steps:
                run.log({"loss": 3.0 - step / 100 + (0.2 if name == "odd" else 0),
                         "tokens": step * (1000.0 if name == "even" else 2000.0)}, step=step)
                time.sleep(0.002)
            assert run.finish().complete
            ids[name] = run.id
        run = tracking.init(name="single", **common)
        run.log({"loss": 1.0}, step=50)
        assert run.finish().complete
        ids["single"] = run.id
        fork = tracking.init(name="even-forked", fork_from=ids["even"], fork_step=40, **common)
        fork.log({"loss": 0.1})
        assert fork.finish().complete
        ids["fork"] = fork.id
        # two long runs (over the 1,500 points a compare chart loads) on different clocks and token rates
        client = httpx.Client(base_url=srv.url, headers={"authorization": f"Bearer {token}"})
        for rid, seconds, tokens in (("long-a", 1.0, 1000.0), ("long-b", 2.0, 3000.0)):
            client.post("/api/runs", json={"id": rid, "project": "cmp", "name": rid, "created": 1.7e9}).raise_for_status()
            steps = list(range(LONG))
            series = {"loss": [3.0 + ((s * 7919) % 101) / 100 for s in steps], "tokens": [s * tokens for s in steps]}
            body = {"batch_id": rid, "metrics": {k: {"steps": steps, "walls": [1.7e9 + s * seconds for s in steps],
                                                      "values": v} for k, v in series.items()}}
            client.post(f"/api/runs/{rid}/batch", json=body).raise_for_status()
            client.post(f"/api/runs/{rid}/finish", json={"status": "finished"}).raise_for_status()
        client.close()
        yield srv.url, ids


def _readout_at(page, chart_id, x):
    return page.evaluate(f"""(() => {{ const u = window.__tracker.charts[{chart_id!r}];
        u.setCursor({{ left: u.valToPos({x}, 'x'), top: 10 }}); return u.readout.textContent; }})()""")


def test_compare_readout_names_every_run_when_runs_log_at_different_steps(site, page):
    url, ids = site
    open_page(page, f"{url}/compare?runs={ids['even']}&runs={ids['odd']}&runs={ids['single']}")
    text = _readout_at(page, "loss", 51)
    assert "odd 2.69" in text and "even " in text and "single 1 (at 50)" in text, text
    page.select_option("#x-axis", "wall")
    mid = page.evaluate("(() => { const u = window.__tracker.charts['loss']; return u.data[0][Math.floor(u.data[0].length / 2)]; })()")
    text = _readout_at(page, "loss", mid)
    assert all(name in text for name in ("even", "odd")), text
    assert not page.errors


def test_a_run_with_a_single_point_is_drawn_on_the_compare_chart(site, page):
    url, ids = site
    open_page(page, f"{url}/compare?runs={ids['even']}&runs={ids['odd']}&runs={ids['single']}")
    green = page.evaluate("""(() => { const u = window.__tracker.charts['loss'];
        const x = Math.round(u.valToPos(50, 'x', true)), y = Math.round(u.valToPos(1.0, 'y', true));
        const d = u.ctx.getImageData(x - 4, y - 4, 9, 9).data; let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i + 1] > 120 && d[i] < 80 && d[i + 2] < 110 && d[i + 3] > 200) n++;
        return n; })()""")
    assert green >= 4, green  # the single run's colour (#16a34a) at its one point
    assert not page.errors


def test_a_forked_run_names_its_source_and_step_and_holds_the_sources_points(site, page):
    url, ids = site
    open_page(page, f"{url}/runs/{ids['fork']}")
    text = page.locator("#fork-of").inner_text()
    assert "forked from even at step 40" in text
    assert page.locator("#fork-of a").get_attribute("href") == f"/runs/{ids['even']}"
    steps = page.evaluate("window.__tracker.charts['loss'].data[0]")
    assert steps[:3] == [0, 2, 4] and steps[-2:] == [40, 41]
    assert not page.errors


def test_compare_draws_runs_against_their_own_tokens(site, page):
    url, ids = site
    open_page(page, f"{url}/compare?runs={ids['even']}&runs={ids['odd']}&x=tokens")
    assert page.input_value("#x-axis") == "tokens"
    xs = page.evaluate("window.__tracker.charts['loss'].data[0]")
    assert 98_000 in xs and 198_000 in xs and max(xs) == 198_000  # odd ran twice the tokens per step
    text = _readout_at(page, "loss", 150_000)
    assert "odd 2.45" in text and "even" not in text, text  # even never ran that many tokens
    assert not page.errors


def test_an_unknown_run_page_is_a_404_that_says_so_in_words(site, page):
    url, _ = site
    resp = page.goto(f"{url}/runs/nosuchrun")
    assert resp.status == 404
    page.wait_for_selector("body[data-ready='error']")
    text = page.locator("#page-error").inner_text()
    assert text == "404 run 'nosuchrun' does not exist" and "{" not in text


def test_compare_smoothing_keeps_each_runs_raw_series_and_names_both(site, page):
    url, ids = site
    open_page(page, f"{url}/compare?runs={ids['even']}&runs={ids['odd']}")
    page.fill("#smoothing", "0.9")
    page.dispatch_event("#smoothing", "input")
    labels = page.evaluate("window.__tracker.charts['loss'].series.slice(1).map(s => s.label)")
    assert labels == ["even raw", "even smoothed 0.9", "odd raw", "odd smoothed 0.9"]
    text = _readout_at(page, "loss", 51)
    assert "odd raw 2.69" in text and "odd smoothed 0.9" in text, text
    assert not page.errors


def _points_within(page, lo, hi):
    """{line label: how many of its drawn points lie in [lo, hi]} on the compare loss chart."""
    return page.evaluate(f"""(() => {{ const u = window.__tracker.charts['loss']; const out = {{}};
        u.lines.forEach(l => {{ out[l.label] = l.xs.filter(x => x >= {lo} && x <= {hi}).length; }});
        return out; }})()""")


@pytest.mark.parametrize(("axis", "lo", "hi", "want"), [
    ("step", 1000, 1200, {"long-a": 201, "long-b": 201}),
    # each run reaches the range at its own steps: a logs every second, b every two seconds
    ("wall", 1000, 1200, {"long-a": 201, "long-b": 101}),
    # a sees 1,000 tokens a step, b 3,000: b's steps 334..400 lie in the range
    ("tokens", 1_000_000, 1_200_000, {"long-a": 201, "long-b": 67}),
])
def test_a_compare_zoom_refetches_each_runs_points_in_range_at_full_resolution(site, page, axis, lo, hi, want):
    url, _ = site
    open_page(page, f"{url}/compare?runs=long-a&runs=long-b&x={axis}")
    before = _points_within(page, lo, hi)
    assert all(before[name] < want[name] for name in want), before  # downsampled: 1,500 of 4,000 points loaded
    page.evaluate(f"window.__tracker.charts['loss'].spec.zoom.set({lo}, {hi})")
    page.wait_for_function("document.body.dataset.zoomed === '1'", timeout=15000)
    assert _points_within(page, lo, hi) == want
    assert not page.errors

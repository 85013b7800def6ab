"""Browser tests: Debian's Chromium, driven by Playwright, renders the dashboard from a live tracker.

Screenshots go to test-artifacts/tracker/ (gitignored) for a human to look at.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from tests.services.tracker.helpers import ServerThread

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "tracker"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"]

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason="browser tests need Debian's chromium: apt-get install -y chromium"
)


def _populate(url: str, token: str, spool: Path) -> dict[str, str]:
    from shared import tracking

    common = dict(url=url, token=token, spool_dir=str(spool), flush_interval=0.05)
    ids = {}
    for name, lr, fp in (("<script>window.__pwned=1</script>moe-bf16", 3e-4, "bf16"), ("moe-fp8", 3e-4, "fp8")):
        run = tracking.init(project="demo", config={"model": {"precision": fp, "top_k": 2}, "optim": {"lr": lr}},
                            name=name, tags=["moe", fp], **common)
        for step in range(300):
            loss = 4.0 * math.exp(-step / 120) + 1.5 + (0.05 if fp == "fp8" else 0.0)
            run.log({"loss": loss, "lr": lr * min(1, step / 50), "tokens_per_s": 41000 + step, "mfu": 0.31,
                     "router/maxvio": 1.0 / (1 + step / 30), "router/dead_experts": 2 if step < 100 else 0}, step=step)
            if step % 10 == 0:
                run.log({"eval/loss": loss + 0.1}, step=step)
                for layer in range(2):
                    counts = [100 + (e * 37 * (layer + 1) + step) % 90 for e in range(8)]
                    run.log_histogram(f"router/load/layer{layer}", counts, step=step)
                    run.log({f"router/maxvio/layer{layer}": max(counts) / (sum(counts) / 8) - 1}, step=step)
        run.event("router_health", "expert 3 dead for 100 steps", step=100, layer=1, expert=3)
        run.log_funnel({"raw": 10000, "language": 7400, "repetition": 6100, "dedup": 5100}, name="documents")
        run.log_calibration([i / 25 for i in range(100)], [i / 25 * 0.9 for i in range(100)], name="helpfulness")
        run.finish()
        ids[fp] = run.id
    return ids


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    from services.tracker.app import create_app
    from services.tracker.store import Store

    tmp = tmp_path_factory.mktemp("tracker-browser")
    store = Store(f"sqlite:///{tmp}/tracker.db")
    token = store.create_token("browser")
    srv = ServerThread(lambda: create_app(store=store)).start()
    ids = _populate(srv.url, token, tmp / "spool")
    yield srv.url, ids
    srv.stop()


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        # bypass_csp: the page CSP forbids eval, which wait_for_function needs; escaping is tested without it
        pg = browser.new_page(viewport={"width": 1400, "height": 1000}, bypass_csp=True)
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.errors = errors
        yield pg
        browser.close()


def test_run_list_shows_runs_and_renders_a_script_name_as_text(live, page):
    url, ids = live
    page.goto(url + "/")
    page.wait_for_selector("body[data-ready='1']", timeout=15000)
    names = page.locator("a.run-name").all_inner_texts()
    assert "<script>window.__pwned=1</script>moe-bf16" in names
    assert "moe-fp8" in names
    assert page.evaluate("window.__pwned") is None
    page.screenshot(path=str(ARTIFACTS / "run_list.png"), full_page=True)
    page.fill("#f-tag", "fp8")
    page.wait_for_function("document.querySelectorAll('#runs tr[data-run]').length === 1", timeout=10000)
    assert page.locator("a.run-name").all_inner_texts() == ["moe-fp8"]
    assert not page.errors


def test_run_page_draws_the_loss_chart_and_expert_heatmap(live, page):
    url, ids = live
    page.goto(f"{url}/runs/{ids['bf16']}")
    page.wait_for_selector("body[data-ready='1']", timeout=15000)
    assert page.locator("#run-name").inner_text().startswith("<script>window.__pwned=1</script>moe-bf16")
    assert page.evaluate("window.__pwned") is None
    drawn = page.evaluate("window.__tracker.charts['loss'].data[1].filter(v => v !== null).length")
    assert drawn == 300
    # the canvas has ink: some pixels inside the plot differ from the background
    inked = page.evaluate(
        """() => { const c = document.querySelector('#card-loss canvas'); const x = c.getContext('2d');
        const d = x.getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }"""
    )
    assert inked > 500
    for key in ("lr", "tokens_per_s", "mfu", "eval/loss", "router/maxvio", "router/dead_experts"):
        assert page.evaluate(f"!!window.__tracker.charts['{key}']"), key
    # per-layer keys share one chart per prefix: x + one line per layer
    assert page.evaluate("window.__tracker.charts['layers:router/maxvio'].series.length") == 3
    cells = page.locator("canvas.heatmap[data-key='router/load/layer1']").get_attribute("data-cells")
    assert int(cells) == 30 * 8
    assert page.locator("#funnels .funnel-row").count() == 4
    assert page.evaluate("!!window.__tracker.charts['calibration:helpfulness']")
    assert "expert 3 dead" in page.locator("#events").inner_text()
    assert '"precision": "bf16"' in page.locator("#config").inner_text()
    page.screenshot(path=str(ARTIFACTS / "run_page.png"), full_page=True)
    page.locator("canvas.heatmap").first.screenshot(path=str(ARTIFACTS / "expert_heatmap.png"))
    page.select_option("#x-axis", "wall")
    page.fill("#smoothing", "0.9")
    page.dispatch_event("#smoothing", "input")
    assert page.evaluate("window.__tracker.charts['loss'].data[1].filter(v => v !== null).length") == 300
    assert not page.errors


def test_compare_page_overlays_runs_and_shows_config_diff(live, page):
    url, ids = live
    page.goto(f"{url}/compare?runs={ids['bf16']}&runs={ids['fp8']}")
    page.wait_for_selector("body[data-ready='1']", timeout=15000)
    series = page.evaluate("window.__tracker.charts['loss'].series.length")
    assert series == 3  # x + one line per run
    diff = page.locator("#config-diff").inner_text()
    assert "model.precision" in diff and '"fp8"' in diff and "optim.lr" not in diff
    page.screenshot(path=str(ARTIFACTS / "compare.png"), full_page=True)
    assert not page.errors

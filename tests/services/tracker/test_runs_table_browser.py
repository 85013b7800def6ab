"""Browser tests (Debian's Chromium via Playwright) for the runs table: metric and config columns,
sorting by a header, config filters, several tags matched all or any (kept in the link), pages past
the first, polls that fetch only changed runs and never a config (the child rows of an opened parent
too), pipeline children nested under their parent by name, and a funnel table with many sources that
scrolls instead of clipping."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.services.tracker.browser import open_page
from tests.services.tracker.helpers import live_tracker


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tracker-table")
    with live_tracker(tmp) as srv:
        token = srv.token
        c = httpx.Client(base_url=srv.url, headers={"authorization": f"Bearer {token}"})

        def run(rid, project="tbl", loss=None, **body):
            c.post("/api/runs", json={"id": rid, "project": project, **body}).raise_for_status()
            if loss is not None:
                log(rid, "loss", loss)

        def log(rid, key, value, step=1):
            c.post(f"/api/runs/{rid}/batch", json={"batch_id": uuid.uuid4().hex, "metrics": {
                key: {"steps": [step], "walls": [1.7e9 + step], "values": [value]}}}).raise_for_status()

        for rid, lr, loss in (("alpha", 3e-4, 2.5), ("beta", 1e-3, 1.5), ("gamma", 1e-4, 3.5)):
            run(rid, name=rid, loss=loss, config={"optim": {"lr": lr}, "pad": "x" * 5000}, tags=["sweep"])
        run("pipe1", name="demo-pipeline", tags=["pipeline"])
        for stage in ("filter", "train"):
            run(f"stage-{stage}", name=f"demo-{stage}", parent="pipe1")
        for i in range(130):
            run(f"m{i:03d}", project="many", name=f"many {i}", created=1.7e9 + i)
        run("pipe2", project="nest", name="second-pipeline")
        for stage in ("a", "b"):
            run(f"p2-{stage}", project="nest", name=f"stage-{stage}", parent="pipe2", loss=2.0)
        for rid, tags in (("t-moe-fp8", ["moe", "fp8"]), ("t-moe", ["moe"]), ("t-dense", ["dense"]), ("t-none", [])):
            run(rid, project="tags", name=rid, tags=tags)
        run("funnels", project="wide", name="many-sources")
        events = [{"kind": "funnel", "message": "", "step": None, "wall": 1.7e9, "data": {
            "name": f"documents/source_with_a_long_name_{i}", "stages": [{"stage": "read", "count": 1000}, {"stage": "kept", "count": 500}]}}
            for i in range(11)]
        c.post("/api/runs/funnels/batch", json={"batch_id": "f", "events": events}).raise_for_status()
        yield srv.url, log, run
        c.close()


def _names(page):
    return page.locator("#runs tr[data-run] a.run-name").all_inner_texts()


def test_metric_and_config_columns_sort_by_their_header(site, page):
    url, *_ = site
    open_page(page, f"{url}/?project=tbl&metrics=loss&columns=optim.lr&nest=0")
    assert page.locator("tr[data-run='beta'] td[data-metric='loss']").inner_text() == "1.5"
    assert page.locator("tr[data-run='beta'] td[data-column='optim.lr']").inner_text() == "0.001"
    page.click("th[data-sort='metric:loss']")
    page.wait_for_function("document.querySelector('th[data-sort=\"metric:loss\"]').textContent.includes('▲')")
    assert _names(page)[:3] == ["beta", "alpha", "gamma"]
    page.click("th[data-sort='config:optim.lr']")
    page.wait_for_function("document.querySelector('th[data-sort=\"config:optim.lr\"]').textContent.includes('▲')")
    assert _names(page)[:3] == ["gamma", "alpha", "beta"]
    assert "sort=config%3Aoptim.lr" in page.url and "desc=0" in page.url  # the view is a shareable link
    assert page.locator("th").first.evaluate("e => getComputedStyle(e).textTransform") == "none"
    assert not page.errors


def test_a_config_filter_keeps_the_runs_whose_value_matches(site, page):
    url, *_ = site
    open_page(page, f"{url}/?project=tbl&nest=0")
    page.fill("#f-config", "optim.lr=0.001")
    page.wait_for_function("document.querySelectorAll('#runs tr[data-run]').length === 1")
    assert _names(page) == ["beta"]
    page.fill("#f-config", "optim.lr")
    page.wait_for_function("document.querySelector('#filter-error').textContent.includes('path=value')")
    assert not page.errors


def test_pages_go_past_the_first_hundred_runs(site, page):
    url, *_ = site
    open_page(page, f"{url}/?project=many")
    assert page.locator("#count").inner_text().startswith("runs 1–100 of 130")
    page.click("#page-next")
    page.wait_for_function("document.querySelector('#count').textContent.startsWith('runs 101–130 of 130')")
    assert _names(page)[-1] == "many 0" and "offset=100" in page.url
    assert not page.errors


def test_the_table_polls_only_changed_runs_and_never_downloads_a_config(site, page):
    url, log, _ = site
    answers = []
    def keep(r):
        if "/api/runs?" in r.url:
            answers.append(r)

    page.on("response", keep)
    open_page(page, f"{url}/?project=tbl&metrics=loss&nest=0&poll=500")
    log("gamma", "loss", 0.25, step=2)
    page.wait_for_function("document.querySelector(\"tr[data-run='gamma'] td[data-metric='loss']\").textContent === '0.25'",
                           timeout=10000)
    page.remove_listener("response", keep)
    bodies = [(r.url, r.json()) for r in list(answers)]
    polls = [body for u, body in bodies if "changed_after" in u]
    assert polls and any([r["id"] for r in p["runs"]] == ["gamma"] for p in polls)
    assert all("config" not in r for _, body in bodies for r in body["runs"])
    assert not page.errors


def test_pipeline_children_are_nested_under_their_parent_named_not_by_id(site, page):
    url, *_ = site
    open_page(page, f"{url}/?project=tbl")
    assert "demo-filter" not in _names(page)  # top level only
    page.click("button.expand[data-run='pipe1']")
    page.wait_for_selector("tr.child-row[data-run='stage-filter']")
    rows = page.locator("#runs tr[data-run]").evaluate_all("rs => rs.map(r => r.dataset.run)")
    at = rows.index("pipe1")
    assert rows[at + 1 : at + 3] == ["stage-filter", "stage-train"]
    assert page.locator("tr[data-run='stage-filter'] a.parent-link").inner_text() == "↑ demo-pipeline"
    assert not page.errors


def test_a_funnel_table_of_many_sources_scrolls_instead_of_clipping(site, page):
    url, *_ = site
    page.set_viewport_size({"width": 1000, "height": 900})
    try:
        open_page(page, f"{url}/runs/funnels")
        clipper = page.evaluate("""(() => { let e = document.querySelector('.funnel-matrix').parentElement;
            while (e && e.scrollWidth <= e.clientWidth + 1) e = e.parentElement;
            return e ? getComputedStyle(e).overflowX : 'none'; })()""")
        assert clipper in ("auto", "scroll"), clipper
        assert page.locator(".funnel-matrix th").count() == 12
    finally:
        page.set_viewport_size({"width": 1400, "height": 1000})
    assert not page.errors


def test_polls_update_the_child_rows_of_an_opened_parent_and_list_a_new_child(site, page):
    url, log, run = site
    open_page(page, f"{url}/?project=nest&metrics=loss&poll=500")
    page.click("button.expand[data-run='pipe2']")
    page.wait_for_selector("tr.child-row[data-run='p2-b']")
    log("p2-b", "loss", 0.75, step=2)  # a child run changes: not a top-level row
    page.wait_for_function("document.querySelector(\"tr[data-run='p2-b'] td[data-metric='loss']\").textContent === '0.75'",
                           timeout=10000)
    run("p2-c", project="nest", name="stage-c", parent="pipe2")  # a new child of the opened parent
    page.wait_for_selector("tr.child-row[data-run='p2-c']", timeout=10000)
    rows = page.locator("#runs tr[data-run]").evaluate_all("rs => rs.map(r => r.dataset.run)")
    assert rows == ["pipe2", "p2-a", "p2-b", "p2-c"]
    assert page.locator("button.expand[data-run='pipe2']").inner_text() == "▾ 3"
    assert not page.errors


def test_several_tags_filter_by_all_or_any_and_the_choice_is_in_the_link(site, page):
    url, *_ = site
    open_page(page, f"{url}/?project=tags&tag=moe,fp8")
    assert _names(page) == ["t-moe-fp8"]  # all of them, by default
    page.select_option("#f-tag-mode", "any")
    page.wait_for_function("document.querySelectorAll('#runs tr[data-run]').length === 2")
    assert sorted(_names(page)) == ["t-moe", "t-moe-fp8"]
    assert "tag=moe%2Cfp8" in page.url and "tagmode=any" in page.url
    open_page(page, page.url)  # the link reopens the same view
    assert page.locator("#f-tag-mode").input_value() == "any" and page.locator("#f-tag").input_value() == "moe, fp8"
    assert sorted(_names(page)) == ["t-moe", "t-moe-fp8"]
    page.fill("#f-tag", "fp8, dense")
    page.wait_for_function("document.querySelector('#runs tr[data-run=\"t-dense\"]') !== null")
    assert sorted(_names(page)) == ["t-dense", "t-moe-fp8"]
    assert not page.errors

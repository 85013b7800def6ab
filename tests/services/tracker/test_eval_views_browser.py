"""Browser tests (Debian's Chromium via Playwright) for what evaluation, export and ablation stages
leave on runs: BPB per reference set on one chart and each task's metrics on one chart per task,
the frozen router's MaxVio beside the step MaxVio with the data's floor as a line,
exports (events of kind `artifact`) listed with their checks and source checkpoint, and an
ablation's `ablation_report` event shown as its report on the ablation run's page."""

from __future__ import annotations

import pytest

from tests.services.tracker.browser import open_page
from tests.services.tracker.helpers import live_tracker


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from cluster.ablation.report import build_report
    from shared import tracking

    tmp = tmp_path_factory.mktemp("tracker-eval")
    with live_tracker(tmp) as srv:
        token = srv.token
        common = dict(project="ev", url=srv.url, token=token, spool_dir=str(tmp / "spool"), flush_interval=0.05,
                      system_metrics_s=0)
        ids = {}
        pipe = tracking.init(name="demo-pipeline", tags=["pipeline"], **common)
        stage = tracking.init(name="demo-train", parent=pipe.id, **common)
        train = tracking.init(name="train", parent=stage.id, **common)
        for step in range(0, 50, 10):
            train.log({"loss": 3 - step / 50, "eval/bpb/prose": 2.0 - step / 100, "eval/bpb/code": 1.5 - step / 100,
                       "eval/task/cloze/acc": 0.25 + step / 200, "eval/task/cloze/logprob": -3 + step / 50,
                       "eval/task/arith/acc": 0.1 + step / 500, "router/maxvio": 0.5 - step / 200, "router/maxvio_chance": 0.05,
                       "router/maxvio/layer0": 0.4 - step / 200, "router/maxvio/layer1": 0.45 - step / 200}, step=step)
        train.log({"router_frozen/maxvio_worst": 0.14, "router_frozen/floor": 0.08, "router_frozen/maxvio/0": 0.12,
                   "router_frozen/maxvio/1": 0.14, "router_calibration/maxvio_before/0": 0.2,
                   "router_calibration/maxvio_after/0": 0.09}, step=40)
        train.event("artifact", "exported to runs/export as DeepseekV3ForCausalLM", step=40, path="runs/export", format="hf",
                    architecture="DeepseekV3ForCausalLM", max_abs_logit_diff=3.2e-5, greedy_equal=True,
                    source_checkpoint="runs/train/step_40")
        assert train.finish().complete and stage.finish().complete and pipe.finish().complete
        ids["train"] = train.id
        ablation = tracking.init(name="demo-ablation", tags=["ablation"], **common)
        results = {}
        for arm in ("raw", "curated"):
            for seed in (1, 2, 3):
                child = tracking.init(name=f"{arm}-s{seed}", tags=["ablation:demo", f"arm:{arm}"], parent=ablation.id, **common)
                bpb = 1.6 - (0.1 if arm == "curated" else 0) + seed / 100
                child.log({"eval/bpb/prose": bpb}, step=0)
                assert child.finish().complete
                results[(arm, seed)] = {"metrics": {"eval/bpb/prose": bpb}, "run_id": child.id}
        report = build_report("demo", "raw", ["raw", "curated"], [1, 2, 3], results, {}, {"budget_tokens": 20000, "arms": {}})
        ablation.event("ablation_report", "2 arms × 3 seeds against raw", **report)
        assert ablation.finish().complete
        ids["ablation"] = ablation.id
        ids["verdict"] = report["verdicts"][0]
        yield srv.url, ids


def test_bpb_sets_share_one_chart_and_each_task_has_its_own(site, page):
    url, ids = site
    open_page(page, f"{url}/runs/{ids['train']}")
    labels = page.evaluate("window.__tracker.charts['eval:bpb'].series.slice(1).map(s => s.label)")
    assert sorted(labels) == ["code", "prose"]
    assert page.evaluate("window.__tracker.charts['eval:bpb'].axes[1].label") == "bits per byte"
    cloze = page.evaluate("window.__tracker.charts['eval:task:cloze'].series.slice(1).map(s => s.label)")
    assert sorted(cloze) == ["acc", "logprob"]
    assert page.evaluate("!!window.__tracker.charts['eval:task:arith']")
    assert page.locator("#charts-evaluation .card").count() == 3
    assert not page.evaluate("!!window.__tracker.charts['eval/bpb/prose']")  # not one chart per key
    assert not page.errors


def test_exports_are_listed_with_their_checks_and_source_checkpoint(site, page):
    url, ids = site
    open_page(page, f"{url}/runs/{ids['train']}")
    text = page.locator("#exports-table").inner_text()
    assert "runs/export" in text and "DeepseekV3ForCausalLM" in text and "3.200e-5" in text
    assert "runs/train/step_40" in text and "yes" in text
    lineage = page.locator("#export-lineage").inner_text()
    assert lineage == "lineage: demo-pipeline › demo-train › train → 1 export(s): runs/export"
    assert not page.errors


def test_the_ablation_run_shows_its_report(site, page):
    url, ids = site
    open_page(page, f"{url}/runs/{ids['ablation']}")
    assert ids["verdict"] in page.locator("#ablation-verdicts").inner_text()
    arms = page.locator("#ablation-arms").inner_text()
    assert "raw (baseline)" in arms and "± " in arms and "(n 3)" in arms
    comp = page.locator("#ablation-comparisons tr[data-arm='curated']").inner_text()
    assert "-0.1" in comp and "95%" in comp
    href = page.locator("#ablation-compare").get_attribute("href")
    assert href.startswith("/compare?group=tags&") and href.count("runs=") == 6
    assert "ablation_report" not in page.locator("#events").inner_text()  # not dumped into the events table
    assert not page.errors


def test_the_frozen_routers_maxvio_sits_beside_the_step_maxvio_with_the_floor_as_a_line(site, page):
    url, ids = site
    open_page(page, f"{url}/runs/{ids['train']}")
    labels = page.evaluate("window.__tracker.charts['router/maxvio'].series.slice(1).map(s => s.label)")
    assert labels[:2] == ["router/maxvio", "frozen router, worst layer"]
    assert sorted(labels[2:]) == ["chance level (uniform routing)", "floor set by the data"]
    floor = page.evaluate("""(() => { const u = window.__tracker.charts['router/maxvio'];
        const i = u.series.findIndex(s => s.label === 'floor set by the data');
        return [u.data[0][0], u.data[0][u.data[0].length - 1], u.data[i][0], u.data[i][u.data[0].length - 1]]; })()""")
    assert floor == [0, 40, 0.08, 0.08]  # one value, drawn across the whole chart
    per_layer = page.evaluate("window.__tracker.charts['layers:router/maxvio'].series.slice(1).map(s => s.label)")
    assert per_layer == ["layer 0", "layer 1", "layer 0 after calibration", "layer 0 before calibration", "layer 0 frozen",
                         "layer 1 frozen"]
    assert not page.evaluate("!!window.__tracker.charts['router/maxvio_chance']")  # not a chart of its own
    assert "router_frozen" not in page.locator("#summary").inner_text()
    assert not page.errors

"""What the browser tests share: Debian's Chromium through Playwright, and a tracker holding the runs
a researcher would look at (two MoE runs with > 32 keys, a pipeline of 7 stages with funnels and
calibration, a 1M-point series with one NaN), logged through `shared.tracking` like the stages do."""

from __future__ import annotations

import math
import time
import uuid
from pathlib import Path

import httpx

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "tracker"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"]
STAGES = ["filter", "label", "distill", "calibrate", "score", "tokenize", "train"]
NAN_STEP = 600_000


def populate_runs(url: str, token: str, spool: Path) -> dict[str, str]:
    from shared import tracking

    common = dict(url=url, token=token, spool_dir=str(spool), flush_interval=0.05)
    ids = {}
    runs = (("<script>window.__pwned=1</script>moe-bf16", "bf16", ["moe", "bf16"], 0.0),
            ("moe-fp8", "fp8", ["moe", "fp8"], 0.05), ("moe-fp8-seed2", "fp8", ["moe", "seed2"], 0.08))
    for name, fp, tags, offset in runs:
        run = tracking.init(project="demo", config={"model": {"precision": fp, "top_k": 2}, "optim": {"lr": 3e-4}},
                            name=name, tags=tags, **common)
        for step in range(300):
            loss = 4.0 * math.exp(-step / 120) + 1.5 + offset
            m = {"loss": loss, "lr": 3e-4 * min(1, step / 50), "tokens_per_s": 41000 + step, "mfu": 0.31,
                 "router/maxvio": 1.0 / (1 + step / 30), "router/dead_experts": 2 if step < 100 else 0}
            for layer in range(8):
                for prefix in ("router/entropy", "grad_norm", "update_rms"):
                    m[f"{prefix}/layer{layer}"] = 1.0 / (1 + step / (10 + layer)) + offset
            run.log(m, step=step)
            if step % 10 == 0:
                run.log({"eval/loss": loss + 0.1}, step=step)
                for layer in range(2):
                    counts = [100 + (e * 37 * (layer + 1) + step) % 90 for e in range(8)]
                    run.log_histogram(f"router/load/layer{layer}", counts, step=step)
                    run.log({f"router/maxvio/layer{layer}": max(counts) / (sum(counts) / 8) - 1}, step=step)
        run.log({"final/params": 485_443, "final/tokens": 91_931}, step=300)
        run.event("router_health", "expert 3 dead for 100 steps", step=100, layer=1, expert=3)
        run.log_funnel({"raw": 10000, "language": 7400, "repetition": 6100, "dedup": 5100}, name="documents")
        run.log_calibration([i / 25 for i in range(100)], [i / 25 * 0.9 for i in range(100)], name="helpfulness")
        run.finish()
        ids[fp if fp not in ids else "fp8b"] = run.id
    return ids


def populate_pipeline(url: str, token: str, spool: Path) -> dict[str, str]:
    """A pipeline run with one child run per stage (as cluster.pipeline makes them) and the stages'
    own report runs below them: the data filter's funnels and the calibration's reliability data."""
    from shared import tracking

    common = dict(url=url, token=token, spool_dir=str(spool), flush_interval=0.05)
    pipe = tracking.init(project="demo", name="demo-pipeline", tags=["pipeline"], **common)
    out = {"pipeline": pipe.id}
    for stage in STAGES:
        run = tracking.init(project="demo", name=f"demo-{stage}", tags=["stage", stage], parent=pipe.id, **common)
        if stage == "filter":
            detail = tracking.init(project="demo", name="demo-data-filter", tags=["data_filter"], parent=run.id, **common)
            detail.log_funnel({"read": 240, "valid": 238, "language": 210, "dedup": 173}, name="documents")
            for src, n in (("wiki", 60), ("python", 60), ("sympy", 60), ("sympy_physics", 60)):
                detail.log_funnel({"read": n, "valid": n - 1, "language": n - 5, "dedup": n - 15}, name=f"documents/{src}")
            detail.finish()
            out["filter_detail"] = detail.id
        if stage == "calibrate":
            detail = tracking.init(project="demo", name="demo-score-calibrate", parent=run.id, **common)
            for rubric in ("helpfulness", "correctness"):
                pred = [(i % 40) / 10 for i in range(200)]
                detail.log_calibration(pred, [min(4.0, p * 0.8 + 0.3) for p in pred], name=rubric)
            detail.finish()
            out["calibrate_detail"] = detail.id
        time.sleep(0.15)
        run.log({"records": 240, "written": 173, "seconds": 0.15}, step=0)
        run.finish()
        out[stage] = run.id
    pipe.finish()
    return out


def populate_million(url: str, token: str) -> str:
    """1,000,000 points of a random walk with one NaN at NAN_STEP, sent as the API takes them."""
    import numpy as np

    h = {"authorization": f"Bearer {token}"}
    run_id = uuid.uuid4().hex[:16]
    httpx.post(f"{url}/api/runs", json={"id": run_id, "project": "demo", "name": "1M points"}, headers=h).raise_for_status()
    values = np.random.default_rng(0).standard_normal(1_000_000).cumsum() * 0.01 + 5
    for lo in range(0, 1_000_000, 200_000):
        vals = [float(v) for v in values[lo : lo + 200_000]]
        if lo <= NAN_STEP < lo + 200_000:
            vals[NAN_STEP - lo] = "NaN"
        body = {"batch_id": uuid.uuid4().hex, "metrics": {"loss": {
            "steps": list(range(lo, lo + 200_000)), "walls": [1.7e9 + s * 0.01 for s in range(lo, lo + 200_000)],
            "values": vals}}}
        httpx.post(f"{url}/api/runs/{run_id}/batch", json=body, headers=h, timeout=120).raise_for_status()
    httpx.post(f"{url}/api/runs/{run_id}/finish", json={"status": "finished"}, headers=h).raise_for_status()
    return run_id


def open_page(page, url: str, timeout_ms: int = 15000) -> None:
    """Load a dashboard page and wait until its script says it has drawn everything."""
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=timeout_ms)


def inked(page, selector: str) -> int:
    """Pixels with ink in a canvas (a drawn chart has hundreds)."""
    return page.evaluate(
        """(sel) => { const c = document.querySelector(sel); const x = c.getContext('2d');
        const d = x.getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }""", selector)

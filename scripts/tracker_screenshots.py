"""Screenshots of the dashboard for docs/tracker.md: a run page, compare, the runs table and an
ablation report, taken in Debian's Chromium (Playwright) from a throwaway tracker holding runs
logged through `shared.tracking` the way the stages log them.

    python -m scripts.tracker_screenshots --out docs/images/tracker

The runs are made up (seeded, so a rerun draws the same curves) but shaped like the demo's: a
training run with router statistics, expert-load heatmaps, evaluation sets and tasks, a second
seed and an fp8 twin to compare, a pipeline with its stages, and an ablation with its arm-seed
runs and report.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn

CHROMIUM = "/usr/bin/chromium"
SHOTS = ("run_page.png", "compare.png", "runs_table.png", "ablation_report.png")


def serve(db_url: str) -> tuple[str, str, uvicorn.Server]:
    """A tracker on a free loopback port: (url, write token, server)."""
    from services.tracker.app import create_app
    from services.tracker.store import Store
    from shared.net import free_port

    store = Store(db_url)
    token = store.create_token("screenshots")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(store=store), host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off", access_log=False))
    threading.Thread(target=server.run, daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return url, token, server
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"the tracker did not start on {url}")


def training_run(common: dict, name: str, precision: str, seed: int, parent: str | None = None) -> str:
    from shared import tracking

    rng = random.Random(seed)
    run = tracking.init(name=name, parent=parent, tags=["train", "moe", precision],
                        config={"model": {"precision": precision, "moe": {"top_k": 2, "experts": 8}},
                                "optim": {"lr": 3e-3 if precision == "bf16" else 2.5e-3}, "seed": seed}, **common)
    offset = 0.04 if precision == "fp8" else 0.0
    for step in range(400):
        loss = 3.2 * math.exp(-step / 110) + 2.1 + offset + rng.gauss(0, 0.05)
        m = {"loss": loss, "lr": 3e-3 * min(1, (step + 1) / 40) * (0.1 + 0.9 * (1 - step / 400)),
             "tokens": (step + 1) * 16384.0, "tokens_per_s": 41000 + rng.gauss(0, 900), "mfu": 0.31 + rng.gauss(0, 0.005),
             "router/maxvio": 0.9 / (1 + step / 25) + 0.05 + abs(rng.gauss(0, 0.01))}
        for layer in range(4):
            m[f"router/maxvio/layer{layer}"] = 0.8 / (1 + step / (15 + 5 * layer)) + 0.04 + abs(rng.gauss(0, 0.01))
            m[f"grad_norm/layer{layer}"] = 1.5 / (1 + step / 60) + 0.2 + abs(rng.gauss(0, 0.03))
        run.log(m, step=step)
        if step % 20 == 0 or step == 399:
            run.log({"eval/loss": loss + 0.08, "eval/bpb/prose": 1.45 * loss / 3, "eval/bpb/code": 1.2 * loss / 3,
                     "eval/bpb/math": 1.3 * loss / 3, "eval/task/cloze/acc": 0.25 + 0.2 * (1 - math.exp(-step / 150)),
                     "eval/task/arith/acc": 0.1 + 0.15 * (1 - math.exp(-step / 200))}, step=step)
            for layer in range(2):
                hot = 1 + 2.5 * math.exp(-step / 60)
                counts = [1000 * (hot if e == 3 else 1) + rng.randint(-80, 80) for e in range(8)]
                run.log_histogram(f"router/load/layer{layer}", counts, step=step)
    run.event("router_health", "expert 3 of layer 0 carried 2.6x its share", step=30, layer=0, expert=3)
    run.event("artifact", "exported to runs/export as DeepseekV3ForCausalLM", step=399, path="runs/export/" + name,
              format="hf", architecture="DeepseekV3ForCausalLM", max_abs_logit_diff=2.4e-5, greedy_equal=True,
              source_checkpoint=f"runs/{name}/step_399")
    run.log({"final/params": 4.85e8, "final/active_params": 1.3e8}, step=0)
    run.finish()
    return run.id


def populate(url: str, token: str, spool: Path) -> dict[str, str]:
    from cluster.ablation.report import build_report
    from shared import tracking

    common = dict(project="demo", url=url, token=token, spool_dir=str(spool), flush_interval=0.1, system_metrics_s=0)
    ids = {}
    pipe = tracking.init(name="demo-pipeline", tags=["pipeline"], **common)
    for stage in ("filter", "label", "distill", "calibrate", "score", "tokenize"):
        st = tracking.init(name=f"demo-{stage}", tags=["stage", stage], parent=pipe.id, **common)
        st.log({"records": 2400.0, "written": 1730.0}, step=0)
        st.finish()
    ids["train"] = training_run(common, "moe-bf16", "bf16", 0, parent=pipe.id)
    pipe.finish()
    ids["fp8"] = training_run(common, "moe-fp8", "fp8", 1)
    ids["seed2"] = training_run(common, "moe-bf16-seed2", "bf16", 2)
    ablation = tracking.init(name="demo-ablation", tags=["ablation"], **common)
    results = {}
    rng = random.Random(7)
    for arm, gain in (("raw", 0.0), ("filters", 0.03), ("curated", 0.07)):
        for seed in (1, 2, 3):
            child = tracking.init(name=f"{arm}-s{seed}", tags=["ablation:demo", f"arm:{arm}"], parent=ablation.id, **common)
            figures = {"eval/bpb/prose": 1.62 - gain + 0.01 * seed + rng.gauss(0, 0.012),
                       "eval/bpb/code": 1.31 - gain / 2 + 0.012 * seed + rng.gauss(0, 0.015),
                       "eval/task/cloze/acc": 0.31 + gain / 2 + 0.005 * seed + rng.gauss(0, 0.02)}
            child.log(figures, step=0)
            child.finish()
            results[(arm, seed)] = {"metrics": figures, "run_id": child.id}
    report = build_report("demo", "raw", ["raw", "filters", "curated"], [1, 2, 3], results, {},
                          {"budget_tokens": 2_000_000, "arms": {}})
    ablation.event("ablation_report", "3 arms x 3 seeds against raw", **report)
    ablation.finish()
    ids["ablation"] = ablation.id
    return ids


def shoot(url: str, ids: dict[str, str], out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1100})

        def open_(path: str) -> None:
            page.goto(url + path)
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)

        open_(f"/runs/{ids['train']}?panel=loss,eval/loss")
        page.screenshot(path=str(out / SHOTS[0]), clip={"x": 0, "y": 0, "width": 1400, "height": 2200}, full_page=True)
        open_(f"/compare?runs={ids['train']}&runs={ids['seed2']}&runs={ids['fp8']}")
        page.screenshot(path=str(out / SHOTS[1]), clip={"x": 0, "y": 0, "width": 1400, "height": 1500}, full_page=True)
        open_("/?project=demo&metrics=loss,eval/bpb/prose&columns=model.precision,optim.lr")
        page.screenshot(path=str(out / SHOTS[2]), full_page=True)
        open_(f"/runs/{ids['ablation']}")
        box = page.locator("#h-ablation").bounding_box()
        end = page.locator("#ablation-report").bounding_box()
        page.screenshot(path=str(out / SHOTS[3]), full_page=True, clip={
            "x": 0, "y": box["y"] - 8, "width": 1400, "height": end["y"] + end["height"] - box["y"] + 16})
        browser.close()
    return [out / s for s in SHOTS]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("docs/images/tracker"), help="folder for the PNG files")
    args = ap.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"no browser at {CHROMIUM}: apt-get install -y chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tracker-shots-") as tmp:
        url, token, server = serve(f"sqlite:///{tmp}/tracker.db")
        try:
            ids = populate(url, token, Path(tmp) / "spool")
            for path in shoot(url, ids, args.out):
                print(f"wrote {path} ({path.stat().st_size:,} bytes)")
        finally:
            server.should_exit = True
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

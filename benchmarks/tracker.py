"""Tracker vs MLflow, same load, same machine: ingest rate of 8 concurrent clients, the latency of a
1M-point series fetched downsampled to 2,000 points, and (ours only) two dashboard pages in Chromium.

    .venv/bin/python benchmarks/tracker.py            # full: 8 clients x 20k points, 1M-point series, 3 rounds
                                                      # (also written to benchmarks/results/tracker.json)
    .venv/bin/python benchmarks/tracker.py --quick    # smoke: 8 x 2k points, 20k-point series, 1 round

Both servers run as subprocesses on SQLite with their defaults: ours is `moelab tracker serve`
(one uvicorn process); MLflow is `mlflow server --backend-store-uri sqlite:///…` (its default 4
workers). Each side's load comes from its own client library in a subprocess with 8 threads, 4
keys per step, with the same batching: ours through `shared.tracking` with at most 1,000 points
per request (`max_batch_points`), MLflow through `MlflowClient.log_batch` with 1,000 metrics per
call (its per-request maximum). MLflow's asynchronous logging (`log_batch(..., synchronous=False)`
once per step, batched by MLflow's own queue) is a second contender. The contenders run in
interleaved rounds (the order rotates each round) and each rate is the median over rounds.

A contender counts only when its server holds every point: our `finish()` must report the run
complete and the benchmark then counts the stored points through the API; MLflow's points are
counted with `get_metric_history`. A shortfall on either side fails the benchmark (exit 1): an
undelivered run would otherwise read as a huge ingest rate.

The downsampled fetch is ours `GET /api/runs/{id}/series?points=2000` vs MLflow's
`get-history-bulk-interval?max_results=2000` (what MLflow's UI uses); `query_ms` is our first
(cold) fetch, `query_warm_ms` the median of 10 repeats. The browser part times, in Debian's
Chromium, the runs list over `--page-runs` runs (500) and a run page with 50 keys, until each page
says it has drawn everything (no peer: MLflow's UI is not served by the same process model).

MLflow lives in its own venv (runs/bench-venvs/mlflow, gitignored, created here on first use)
because its pins would replace the project's pyarrow. Last output line: one JSON object with
`ratio` (our ingest rate / MLflow's synchronous one), `ratio_async` (/ MLflow's asynchronous one)
and `query_ms`. Targets: ratio >= 20, query_ms < 100. Timings from a loaded machine (see
`load_avg_1m`) are not comparable with a quiet one.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python benchmarks/tracker.py` puts benchmarks/ first on sys.path, where sibling benchmarks
# (e.g. tokenize.py) would shadow standard-library modules; drop it before any other import.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
import uuid  # noqa: E402

from shared.net import free_port  # noqa: E402
from shared.provenance import cpu_and_flags, load_average_text, tree_commit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MLFLOW_VENV = ROOT / "runs" / "bench-venvs" / "mlflow"
KEYS = ("loss", "lr", "grad_norm", "tokens_per_s")
BATCH_POINTS = 1000  # points per request on both sides: MLflow's log_batch maximum
CONTENDERS = ("ours", "mlflow", "mlflow_async")


class NotStored(RuntimeError):
    """A server holds fewer points than its client logged: the timing would be meaningless."""


def require_stored(side: str, stored: int, expected: int) -> None:
    if stored != expected:
        raise NotStored(f"{side}: the server holds {stored:,} of the {expected:,} points its clients logged; "
                        "an ingest rate over undelivered points means nothing")


def wait_http(url: str, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"server at {url} did not come up in {timeout:.0f} s")


# ------------------------------------------------------------------ load clients (run in subprocesses)
def load_ours(url: str, token: str, clients: int, steps: int, spool: str) -> dict:
    sys.path.insert(0, str(ROOT))
    from shared import tracking

    run_ids: list[str] = []

    def worker(i: int) -> None:
        run = tracking.init(project="bench", name=f"client{i}", url=url, token=token, spool_dir=spool,
                            max_batch_points=BATCH_POINTS)
        for step in range(steps):
            run.log({"loss": 1.0 / (step + 1), "lr": 3e-4, "grad_norm": 0.5 + i, "tokens_per_s": 4e4}, step=step)
        delivery = run.finish(timeout=600)
        run_ids.append(run.id)
        if not delivery.complete:
            raise NotStored(delivery.summary())

    return {**_timed_threads(worker, clients, steps), "runs": run_ids}


def count_ours(url: str, run_ids: list[str]) -> int:
    """Scalar points our server holds for these runs, read back through its API."""
    import httpx

    total = 0
    for run_id in run_ids:
        keys = httpx.get(f"{url}/api/runs/{run_id}/keys", timeout=60).json()
        total += sum(k["points"] for k in keys.get("scalars", []))
    return total


def load_mlflow(url: str, clients: int, steps: int, asynchronous: bool = False) -> dict:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=url)
    exp = client.create_experiment(f"bench-{uuid.uuid4().hex[:8]}")
    per_call = BATCH_POINTS // len(KEYS)
    retries, run_ids = [], []

    def retry(fn, *a, **kw):
        """MLflow's server drops connections now and then on a loaded machine: retry, and count it."""
        for attempt in range(3):
            try:
                return fn(*a, **kw)
            except Exception:
                if attempt == 2:
                    raise
                retries.append(1)
                time.sleep(1.0)

    def values(i: int, step: int):
        return zip(KEYS, (1.0 / (step + 1), 3e-4, 0.5 + i, 4e4), strict=True)

    def worker(i: int) -> None:
        run_id = retry(client.create_run, exp).info.run_id
        run_ids.append(run_id)
        if asynchronous:  # one call per step, as a training loop logs; MLflow's queue batches them
            pending = [client.log_batch(run_id, metrics=[Metric(k, v, int(time.time() * 1000), step)
                                                         for k, v in values(i, step)], synchronous=False)
                       for step in range(steps)]
            for op in pending:
                op.wait()
        else:
            for start in range(0, steps, per_call):
                ts = int(time.time() * 1000)
                metrics = [Metric(k, v, ts, step) for step in range(start, min(start + per_call, steps))
                           for k, v in values(i, step)]
                retry(client.log_batch, run_id, metrics=metrics)
        retry(client.set_terminated, run_id)

    res = _timed_threads(worker, clients, steps)
    stored = sum(len(client.get_metric_history(r, k)) for r in run_ids for k in KEYS)
    return {**res, "retries": len(retries), "stored": stored}


def _timed_threads(worker, clients: int, steps: int) -> dict:
    errors: list[str] = []

    def guarded(i: int) -> None:
        try:
            worker(i)
        except Exception as exc:  # reported to the parent, which fails the benchmark
            errors.append(f"client {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return {"elapsed_s": elapsed, "points": clients * steps * len(KEYS), "errors": errors}


def run_load(python: str, kind: str, url: str, token: str, clients: int, steps: int, spool: str) -> dict:
    """One contender's load in its own process; fails unless its server holds every point."""
    cmd = [python, "-P", str(Path(__file__).resolve()), "--load-client", kind, "--url", url, "--token", token,
           "--clients", str(clients), "--steps", str(steps), "--spool", spool]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} load client failed:\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if res["errors"]:
        raise NotStored(f"{kind} load client errors: {res['errors'][:3]}")
    stored = count_ours(url, res["runs"]) if kind == "ours" else res["stored"]
    require_stored(kind, stored, res["points"])
    return res


def interleaved(contenders: dict, rounds: int) -> dict[str, list[dict]]:
    """Run each contender once per round, rotating the order, so drift in the machine's load falls
    on every side alike; returns each contender's results in round order."""
    names = list(contenders)
    out: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            out[name].append(contenders[name]())
    return out


# ------------------------------------------------------------------ servers
def ensure_mlflow_venv() -> Path:
    py = MLFLOW_VENV / "bin" / "python"
    if not (MLFLOW_VENV / "bin" / "mlflow").exists():
        print(f"creating {MLFLOW_VENV} with mlflow (its own venv: its pins would downgrade our pyarrow)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(MLFLOW_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "mlflow>=3,<4"], check=True)
    return py


def start_ours(tmp: Path) -> tuple[subprocess.Popen, str, str]:
    db = f"sqlite:///{tmp}/ours.db"
    moelab = [sys.executable, "-m", "moelab.cli", "tracker"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    token = subprocess.run([*moelab, "token", "--db", db], capture_output=True, text=True, check=True,
                           cwd=tmp, env=env).stdout.strip().splitlines()[-1]
    port = free_port()
    proc = subprocess.Popen([*moelab, "serve", "--db", db, "--port", str(port)], cwd=tmp, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz")
    return proc, url, token


def start_mlflow(tmp: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [str(MLFLOW_VENV / "bin" / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{tmp}/mlflow.db",
         "--default-artifact-root", str(tmp / "mlartifacts"), "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", timeout=180)
    return proc, url


# ------------------------------------------------------------------ the 1M-point query
def query_ours(url: str, token: str, n: int) -> dict:
    import httpx
    import numpy as np

    h = {"authorization": f"Bearer {token}"}
    run_id = uuid.uuid4().hex[:16]
    httpx.post(f"{url}/api/runs", json={"id": run_id, "project": "bench", "name": "1M"}, headers=h).raise_for_status()
    rng = np.random.default_rng(0)
    values = rng.standard_normal(n).cumsum()
    for lo in range(0, n, 100_000):
        hi = min(n, lo + 100_000)
        body = {"batch_id": uuid.uuid4().hex, "metrics": {"big": {"steps": list(range(lo, hi)),
                "walls": [1.7e9 + s for s in range(lo, hi)], "values": values[lo:hi].tolist()}}}
        httpx.post(f"{url}/api/runs/{run_id}/batch", json=body, headers=h, timeout=120).raise_for_status()
    times = []
    for _ in range(11):
        t = time.perf_counter()
        r = httpx.get(f"{url}/api/runs/{run_id}/series", params={"key": "big", "points": 2000}, timeout=60)
        r.raise_for_status()
        times.append((time.perf_counter() - t) * 1000)
    body = r.json()
    assert body["total"] == n and body["returned"] <= 2000, body["total"]
    return {"cold_ms": times[0], "warm_ms": statistics.median(times[1:]), "returned": body["returned"]}


def query_mlflow(python: str, url: str, n: int) -> dict:
    """Log the same n-point series to MLflow (8 threads of log_batch), then time its sampled fetch."""
    code = f"""
import json, threading, time, urllib.request, urllib.parse
import numpy as np
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
c = MlflowClient(tracking_uri={url!r})
exp = c.create_experiment("bench-query-" + str(time.time()))
run_id = c.create_run(exp).info.run_id
values = np.random.default_rng(0).standard_normal({n}).cumsum().tolist()
chunks = list(range(0, {n}, 1000))
def worker(k):
    for lo in chunks[k::8]:
        c.log_batch(run_id, metrics=[Metric("big", values[s], 1700000000000 + s, s) for s in range(lo, min(lo + 1000, {n}))])
t0 = time.perf_counter()
ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
log_s = time.perf_counter() - t0
q = urllib.parse.urlencode({{"run_ids": run_id, "metric_key": "big", "max_results": 2000}})
times = []
for _ in range(6):
    t = time.perf_counter()
    with urllib.request.urlopen({url!r} + "/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval?" + q, timeout=600) as r:
        got = json.loads(r.read())
    times.append((time.perf_counter() - t) * 1000)
print(json.dumps({{"log_s": log_s, "cold_ms": times[0], "warm_ms": sorted(times[1:])[2], "returned": len(got.get("metrics", []))}}))
"""
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"MLflow query step failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ dashboard pages in Chromium
CHROMIUM = "/usr/bin/chromium"


def populate_pages(url: str, token: str, n_runs: int, n_keys: int) -> str:
    """`n_runs` runs with a demo-sized config and a few figures, and one run with `n_keys` keys of
    1,000 steps; returns that run's id."""
    import httpx

    h = {"authorization": f"Bearer {token}"}
    config = {"model": {f"p{i}": i for i in range(40)}, "optim": {"lr": 3e-4, "warmup": 100}, "data": {"seed": 0}}
    with httpx.Client(base_url=url, headers=h, timeout=60) as c:
        for i in range(n_runs):
            run_id = f"page{i:05d}"
            c.post("/api/runs", json={"id": run_id, "project": "pages", "name": f"run {i}", "config": config,
                                      "tags": ["bench", f"arm{i % 4}"]}).raise_for_status()
            c.post(f"/api/runs/{run_id}/batch", json={"batch_id": uuid.uuid4().hex, "metrics": {
                "loss": {"steps": [0, 1], "walls": [1.7e9, 1.7e9 + 1], "values": [3.0, 2.0 + i / n_runs]}}}
            ).raise_for_status()
        big = "page-keys"
        c.post("/api/runs", json={"id": big, "project": "pages", "name": f"{n_keys} keys"}).raise_for_status()
        steps = list(range(1000))
        metrics = {f"m/{k:02d}": {"steps": steps, "walls": [1.7e9 + s for s in steps],
                                  "values": [1.0 / (s + 1 + k) for s in steps]} for k in range(n_keys)}
        c.post(f"/api/runs/{big}/batch", json={"batch_id": uuid.uuid4().hex, "metrics": metrics}).raise_for_status()
    return big


def time_pages(url: str, token: str, n_runs: int, n_keys: int, repeats: int) -> dict:
    """Milliseconds until the runs list and the `n_keys` run page say they have drawn everything
    (`body[data-ready='1']`): cold (first load) and the median of `repeats` reloads."""
    if not os.path.exists(CHROMIUM):
        return {"skipped": f"no browser at {CHROMIUM} (apt-get install -y chromium)"}
    from playwright.sync_api import sync_playwright

    big = populate_pages(url, token, n_runs, n_keys)
    out: dict = {"runs": n_runs, "keys": n_keys}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for name, path in (("runs_list", "/?project=pages"), ("run_page", f"/runs/{big}")):
            times = []
            for _ in range(repeats + 1):
                t = time.perf_counter()
                page.goto(url + path)
                page.wait_for_selector("body[data-ready='1']", timeout=120_000)
                times.append((time.perf_counter() - t) * 1000)
            out[f"{name}_cold_ms"] = round(times[0], 1)
            out[f"{name}_ms"] = round(statistics.median(times[1:]), 1)
        browser.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run (seconds)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--steps", type=int, default=None, help="steps per client (4 points each)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3, quick 1)")
    ap.add_argument("--series-points", type=int, default=None)
    ap.add_argument("--page-runs", type=int, default=None, help="runs on the timed runs list (default 500, quick 60)")
    ap.add_argument("--out", type=Path, default=None,
                    help="results JSON (default: benchmarks/results/tracker.json unless --quick)")
    ap.add_argument("--load-client", choices=CONTENDERS, help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--token", default="", help=argparse.SUPPRESS)
    ap.add_argument("--spool", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    steps = args.steps or (500 if args.quick else 5_000)
    if args.load_client:
        res = (load_ours(args.url, args.token, args.clients, steps, args.spool) if args.load_client == "ours"
               else load_mlflow(args.url, args.clients, steps, asynchronous=args.load_client == "mlflow_async"))
        print(json.dumps(res))
        return

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up below on `kill`
    series_n = args.series_points or (20_000 if args.quick else 1_000_000)
    rounds = args.rounds or (1 if args.quick else 3)
    page_runs = args.page_runs or (60 if args.quick else 500)
    mlflow_py = str(ensure_mlflow_venv())
    tmp = Path(tempfile.mkdtemp(prefix="moelab-bench-tracker-"))
    procs = []
    try:
        t0 = time.perf_counter()
        ours, ours_url, token = start_ours(tmp)
        procs.append(ours)
        t1 = time.perf_counter()
        mlf, mlf_url = start_mlflow(tmp)
        procs.append(mlf)
        print(f"start-up: ours {t1 - t0:.1f} s, mlflow {time.perf_counter() - t1:.1f} s", flush=True)
        print(f"servers up: ours {ours_url}, mlflow {mlf_url}; {args.clients} clients x {steps} steps x "
              f"{len(KEYS)} keys = {args.clients * steps * len(KEYS):,} points per contender and round, "
              f"{rounds} interleaved round(s)", flush=True)
        spool = str(tmp / "spool")
        results = interleaved({
            "ours": lambda: run_load(sys.executable, "ours", ours_url, token, args.clients, steps, spool),
            "mlflow": lambda: run_load(mlflow_py, "mlflow", mlf_url, "", args.clients, steps, ""),
            "mlflow_async": lambda: run_load(mlflow_py, "mlflow_async", mlf_url, "", args.clients, steps, ""),
        }, rounds)
        rate = {name: statistics.median(r["points"] / r["elapsed_s"] for r in rs) for name, rs in results.items()}
        print("ingest (median over rounds, every point counted on its server): " + ", ".join(
            f"{name} {rate[name]:,.0f} points/s" for name in CONTENDERS) +
            f"; ours / mlflow {rate['ours'] / rate['mlflow']:.1f}x, ours / mlflow_async "
            f"{rate['ours'] / rate['mlflow_async']:.1f}x", flush=True)
        q = query_ours(ours_url, token, series_n)
        print(f"query {series_n:,} -> <=2000 points: ours cold {q['cold_ms']:.1f} ms, warm {q['warm_ms']:.1f} ms "
              f"({q['returned']} points)", flush=True)
        mq = query_mlflow(mlflow_py, mlf_url, series_n)
        print(f"query on mlflow (get-history-bulk-interval, max_results=2000): cold {mq['cold_ms']:.1f} ms, "
              f"warm {mq['warm_ms']:.1f} ms ({mq['returned']} points; logging the series took {mq['log_s']:.1f} s)",
              flush=True)
        pages = time_pages(ours_url, token, page_runs, 50, repeats=1 if args.quick else 5)
        print(f"dashboard pages in Chromium: {pages}", flush=True)
        result = {
            "ratio": round(rate["ours"] / rate["mlflow"], 2),
            "ratio_async": round(rate["ours"] / rate["mlflow_async"], 2),
            "ingest_points_per_s": round(rate["ours"]),
            "mlflow_points_per_s": round(rate["mlflow"]),
            "mlflow_async_points_per_s": round(rate["mlflow_async"]),
            "points_per_request": BATCH_POINTS,
            "rounds": rounds,
            # each round's rate, in round order: the spread the medians come from
            "points_per_s_by_round": {name: [round(r["points"] / r["elapsed_s"]) for r in rs] for name, rs in results.items()},
            "query_ms": round(q["cold_ms"], 2),
            "query_warm_ms": round(q["warm_ms"], 2),
            "mlflow_query_ms": round(mq["cold_ms"], 2),
            "mlflow_query_warm_ms": round(mq["warm_ms"], 2),
            "query_ratio": round(mq["cold_ms"] / q["cold_ms"], 2),
            "pages": pages,
            "clients": args.clients,
            "points_per_client": steps * len(KEYS),
            "series_points": series_n,
            "mlflow_retries": sum(r.get("retries", 0) for rs in results.values() for r in rs),
            "quick": args.quick,
            "load_avg_1m": round(os.getloadavg()[0], 1),  # the machine is shared: context for the timings
            "load_average_end": load_average_text(),
            "commit": tree_commit(),  # the code the figures belong to
            "machine": {"cpu": cpu_and_flags()[0], "isa_flags": cpu_and_flags()[1], "cores": os.cpu_count()},
            "targets_met": rate["ours"] / rate["mlflow"] >= 20 and q["cold_ms"] < 100,
        }
    except NotStored as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
    finally:
        for p in procs:  # each server runs in its own session: stop it with its workers
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
    out = args.out or (None if args.quick else ROOT / "benchmarks" / "results" / "tracker.json")
    if out is not None:  # atomically: a killed run never leaves half a results file
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        os.replace(tmp, out)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

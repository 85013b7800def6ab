"""Tracker vs MLflow, same load, same run: ingest rate of 8 concurrent clients and the latency of a
1M-point series fetched downsampled to 2,000 points.

    .venv/bin/python benchmarks/tracker.py            # full: 8 clients x 20k points, 1M-point series
                                                      # (also written to benchmarks/results/tracker.json)
    .venv/bin/python benchmarks/tracker.py --quick    # smoke: 8 x 2k points, 20k-point series

Both servers run as subprocesses on SQLite with their defaults: ours is `moelab tracker serve`
(one uvicorn process); MLflow is `mlflow server --backend-store-uri sqlite:///…` (its default 4
workers). Each side's load comes from its own client library in a subprocess with 8 threads, 4
keys per step: ours through `shared.tracking` (background batching), MLflow through
`MlflowClient.log_batch` with 1,000 metrics per call (MLflow's per-request maximum). A client is
done when its points are stored (our `finish()` waits for delivery; MLflow's calls are synchronous).
The downsampled fetch is ours `GET /api/runs/{id}/series?points=2000` vs MLflow's
`get-history-bulk-interval?max_results=2000` (what MLflow's UI uses); `query_ms` is our first
(cold) fetch, `query_warm_ms` the median of 10 repeats.

MLflow lives in its own venv (runs/bench-venvs/mlflow, gitignored, created here on first use)
because its pins would replace the project's pyarrow. Last output line: one JSON object with
`ratio` (our ingest rate / MLflow's) and `query_ms`. Targets: ratio >= 20, query_ms < 100.
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

ROOT = Path(__file__).resolve().parents[1]
MLFLOW_VENV = ROOT / "runs" / "bench-venvs" / "mlflow"
KEYS = ("loss", "lr", "grad_norm", "tokens_per_s")


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

    def worker(i: int) -> None:
        # the client's defaults (flush every tracker.flush_interval_s = 1 s, or at 50k buffered points)
        run = tracking.init(project="bench", name=f"client{i}", url=url, token=token, spool_dir=spool)
        for step in range(steps):
            run.log({"loss": 1.0 / (step + 1), "lr": 3e-4, "grad_norm": 0.5 + i, "tokens_per_s": 4e4}, step=step)
        run.finish(timeout=600)

    return _timed_threads(worker, clients, steps)


def load_mlflow(url: str, clients: int, steps: int) -> dict:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=url)
    exp = client.create_experiment(f"bench-{uuid.uuid4().hex[:8]}")
    per_call = 1000 // len(KEYS)
    retries = []

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

    def worker(i: int) -> None:
        run_id = retry(client.create_run, exp).info.run_id
        for start in range(0, steps, per_call):
            ts = int(time.time() * 1000)
            metrics = [
                Metric(k, v, ts, step)
                for step in range(start, min(start + per_call, steps))
                for k, v in zip(KEYS, (1.0 / (step + 1), 3e-4, 0.5 + i, 4e4), strict=True)
            ]
            retry(client.log_batch, run_id, metrics=metrics)
        retry(client.set_terminated, run_id)

    res = _timed_threads(worker, clients, steps)
    return {**res, "retries": len(retries)}


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
    cmd = [python, "-P", str(Path(__file__).resolve()), "--load-client", kind, "--url", url, "--token", token,
           "--clients", str(clients), "--steps", str(steps), "--spool", spool]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} load client failed:\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if res["errors"]:
        raise RuntimeError(f"{kind} load client errors: {res['errors'][:3]}")
    return res


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run (seconds)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--steps", type=int, default=None, help="steps per client (4 points each)")
    ap.add_argument("--series-points", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None,
                    help="results JSON (default: benchmarks/results/tracker.json unless --quick)")
    ap.add_argument("--load-client", choices=["ours", "mlflow"], help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--token", default="", help=argparse.SUPPRESS)
    ap.add_argument("--spool", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    steps = args.steps or (500 if args.quick else 5_000)
    if args.load_client:
        res = (load_ours(args.url, args.token, args.clients, steps, args.spool) if args.load_client == "ours"
               else load_mlflow(args.url, args.clients, steps))
        print(json.dumps(res))
        return

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up below on `kill`
    series_n = args.series_points or (20_000 if args.quick else 1_000_000)
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
              f"{len(KEYS)} keys = {args.clients * steps * len(KEYS):,} points each side", flush=True)
        o = run_load(sys.executable, "ours", ours_url, token, args.clients, steps, str(tmp / "spool"))
        m = run_load(mlflow_py, "mlflow", mlf_url, "", args.clients, steps, "")
        ours_rate, mlf_rate = o["points"] / o["elapsed_s"], m["points"] / m["elapsed_s"]
        print(f"ingest: ours {ours_rate:,.0f} points/s ({o['elapsed_s']:.2f} s), "
              f"mlflow {mlf_rate:,.0f} points/s ({m['elapsed_s']:.2f} s): {ours_rate / mlf_rate:.1f}x", flush=True)
        q = query_ours(ours_url, token, series_n)
        print(f"query {series_n:,} -> <=2000 points: ours cold {q['cold_ms']:.1f} ms, warm {q['warm_ms']:.1f} ms "
              f"({q['returned']} points)", flush=True)
        mq = query_mlflow(mlflow_py, mlf_url, series_n)
        print(f"query on mlflow (get-history-bulk-interval, max_results=2000): cold {mq['cold_ms']:.1f} ms, "
              f"warm {mq['warm_ms']:.1f} ms ({mq['returned']} points; logging the series took {mq['log_s']:.1f} s)",
              flush=True)
        result = {
            "ratio": round(ours_rate / mlf_rate, 2),
            "ingest_points_per_s": round(ours_rate),
            "mlflow_points_per_s": round(mlf_rate),
            "query_ms": round(q["cold_ms"], 2),
            "query_warm_ms": round(q["warm_ms"], 2),
            "mlflow_query_ms": round(mq["cold_ms"], 2),
            "mlflow_query_warm_ms": round(mq["warm_ms"], 2),
            "query_ratio": round(mq["cold_ms"] / q["cold_ms"], 2),
            "clients": args.clients,
            "points_per_client": steps * len(KEYS),
            "series_points": series_n,
            "mlflow_retries": m.get("retries", 0),
            "quick": args.quick,
            "load_avg_1m": round(os.getloadavg()[0], 1),  # the machine is shared: context for the timings
            "targets_met": ours_rate / mlf_rate >= 20 and q["cold_ms"] < 100,
        }
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

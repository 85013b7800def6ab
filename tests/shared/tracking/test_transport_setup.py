"""What a run's HTTP transport costs once per process, and that it is paid once."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from shared.tracking import transport

ROOT = Path(__file__).resolve().parents[3]


def test_runs_starting_together_load_the_tls_context_once(monkeypatch):
    made = []

    def slow_context():
        time.sleep(0.05)  # long enough for every thread to arrive while the first is still loading
        made.append(object())
        return made[-1]

    monkeypatch.setattr(transport, "_TLS", [])
    monkeypatch.setattr(transport.httpx, "create_ssl_context", slow_context)
    got = []
    threads = [threading.Thread(target=lambda: got.append(transport.tls_context())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1
    assert all(g is made[0] for g in got)


def test_importing_the_tracker_imports_the_http_connection_layer():
    """httpx would import httpcore when a run's first client is made, inside the training loop."""
    code = "import sys, shared.tracking; print('httpcore' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "True"


def _batch(**items):
    body = {"batch_id": "b1", "metrics": {"loss": {"steps": [0, 1, 2], "walls": [1.7e9, 1.7e9 + 0.25, 1.7e9 + 0.5],
                                               "values": [2.5, "NaN", 1e-05]}},
            "histograms": [], "events": [], "artifacts": [], **items}
    return {"op": "batch", "run": "r", "body": body}


def test_a_scalar_batch_encodes_to_the_same_values_and_keeps_nan_as_its_agreed_string():
    op = _batch()
    assert json.loads(transport.encode_body(op)) == op["body"]


def test_nan_outside_the_scalar_columns_is_refused_not_written_as_null():
    """Only scalar columns are NaN-free by construction; an event's data or a run's config is not."""
    with pytest.raises(ValueError):
        transport.encode_body(_batch(events=[{"kind": "k", "message": "", "data": {"x": math.nan}, "step": 0, "wall": 1.0}]))
    with pytest.raises(ValueError):
        transport.encode_body({"op": "init", "run": "r", "body": {"id": "r", "config": {"lr": math.nan}}})

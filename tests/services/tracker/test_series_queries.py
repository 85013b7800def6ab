"""Series queries on real stores: a NaN in a million points survives downsampling as a gap, and a
step range (the dashboard's zoom) comes back at full resolution."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from services.tracker.app import create_app
from services.tracker.store import Store

LOCAL = "http://127.0.0.1"
N = 1_000_000
NAN_AT = 612_345


@pytest.fixture
def api(db_url):
    store = Store(db_url)
    client = TestClient(create_app(store=store, max_body_bytes=64 << 20), base_url=LOCAL)
    client.headers["authorization"] = f"Bearer {store.create_token('test')}"
    client.post("/api/runs", json={"id": "big"})
    yield client
    store.engine.dispose()


def _ingest(api, steps, values, bid):
    values = ["NaN" if np.isnan(v) else float(v) for v in values]
    body = {"batch_id": bid, "metrics": {"loss": {"steps": [int(s) for s in steps],
                                                   "walls": [1.7e9 + s * 0.01 for s in steps], "values": values}}}
    assert api.post("/api/runs/big/batch", json=body).status_code == 200


@pytest.fixture
def million(api):
    values = np.random.default_rng(0).standard_normal(N).cumsum()
    values[NAN_AT] = np.nan
    for lo in range(0, N, 200_000):
        _ingest(api, range(lo, lo + 200_000), values[lo : lo + 200_000], f"b{lo}")
    return values


def test_a_nan_at_one_step_of_a_million_point_series_is_a_gap_at_2000_points_and_in_a_zoom(api, million):
    s = api.get("/api/runs/big/series", params={"key": "loss", "points": 2000}).json()
    assert s["total"] == N and s["returned"] <= 2000
    i = s["steps"].index(NAN_AT)
    assert s["values"][i] is None and [i, "nan"] in s["gaps"]
    finite = [v for v in s["values"] if v is not None]
    assert min(finite) == np.nanmin(million) and max(finite) == np.nanmax(million)
    assert s["nonfinite"] == {"nan": 1, "inf": 0, "-inf": 0, "first_step": NAN_AT}
    # zoomed: a step range comes back at full resolution (one ingest of a million points serves both)
    s = api.get("/api/runs/big/series", params={"key": "loss", "points": 2000, "start": NAN_AT - 500,
                                                "end": NAN_AT + 499}).json()
    assert s["returned"] == 1000 and s["steps"] == list(range(NAN_AT - 500, NAN_AT + 500))
    assert s["values"][500] is None and s["gaps"] == [[500, "nan"]] and s["range"] == [NAN_AT - 500, NAN_AT + 499]
    assert s["values"][0] == pytest.approx(million[NAN_AT - 500])
    wide = api.get("/api/runs/big/series", params={"key": "loss", "points": 2000, "start": 100_000,
                                                   "end": 900_000}).json()
    assert wide["returned"] <= 2000 and wide["steps"][0] >= 100_000 and wide["steps"][-1] <= 900_000
    assert NAN_AT in wide["steps"]
    empty = api.get("/api/runs/big/series", params={"key": "loss", "start": 5 * N, "end": 6 * N}).json()
    assert empty["returned"] == 0


def test_a_range_of_a_series_replayed_out_of_order_is_sorted(api):
    late = np.arange(10_000, 20_000)
    _ingest(api, late, late * 1.0, "late")
    early = np.arange(0, 10_000)
    _ingest(api, early, early * 1.0, "early")
    s = api.get("/api/runs/big/series", params={"key": "loss", "start": 9_990, "end": 10_009, "points": 100}).json()
    assert s["steps"] == list(range(9_990, 10_010))


def test_a_series_stored_before_rollups_had_gaps_still_shows_its_nan(api):
    """Stores written by the previous tracker hold two-part rollups (min, max): the query falls back
    to the raw points for a series with non-finite values, so the gap is never lost."""
    from sqlalchemy import update

    from services.tracker.chunks import POINT_BYTES
    from services.tracker.db import MetricChunk

    values = np.sin(np.arange(200_000) / 1000.0)
    values[123_456] = np.nan
    _ingest(api, range(200_000), values, "old")
    store = api.app.state.store
    with store.engine.begin() as conn:
        for cid, nb, rollup in conn.execute(MetricChunk.__table__.select().with_only_columns(
                MetricChunk.id, MetricChunk.nb, MetricChunk.rollup)):
            conn.execute(update(MetricChunk).where(MetricChunk.id == cid).values(rollup=rollup[: 2 * POINT_BYTES * nb]))
    store._cache.clear()
    s = api.get("/api/runs/big/series", params={"key": "loss", "points": 2000}).json()
    assert 123_456 in s["steps"] and s["values"][s["steps"].index(123_456)] is None

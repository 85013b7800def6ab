"""The ingest statements are built once per store and reused: every run, key and batch must still
reach its own rows (nothing of the first batch may be baked into the shared statements)."""

from __future__ import annotations

import math

import pytest

from services.tracker.store import NotFound, Store
from shared.tracking.schema import Batch, RunCreate


def _batch(bid: str, keys: dict[str, list[int]]) -> Batch:
    return Batch.model_validate({
        "batch_id": bid,
        "metrics": {k: {"steps": s, "walls": [1.0 + x for x in s], "values": [x / 10 for x in s]}
                    for k, s in keys.items()},
    })


def test_reused_statements_keep_runs_keys_and_summaries_apart(db_url):
    store = Store(db_url)
    a = store.create_or_resume(RunCreate(project="p", name="a"))[0]["id"]
    b = store.create_or_resume(RunCreate(project="p", name="b"))[0]["id"]
    assert store.ingest(a, _batch("1", {"loss": [0, 1, 2], "lr": [0]}))["points"] == 4
    assert store.ingest(b, _batch("1", {"loss": [5]}))["points"] == 1  # same batch id, other run: stored
    assert store.ingest(a, _batch("2", {"grad": [7, 8], "loss": [3]}))["points"] == 3
    assert store.ingest(a, _batch("2", {"grad": [9]}))["duplicate"] is True
    got = {s["key"]: (s["points"], s["last_step"], s["last_value"]) for s in store.keys(a)["scalars"]}
    assert got == {"grad": (2, 8, 0.8), "loss": (4, 3, 0.3), "lr": (1, 0, 0.0)}
    assert {s["key"]: s["points"] for s in store.keys(b)["scalars"]} == {"loss": 1}
    assert math.isclose(store.get_run(a)["last_seen"], store.get_run(a)["updated"])
    with pytest.raises(NotFound):
        store.ingest("nope", _batch("3", {"loss": [1]}))

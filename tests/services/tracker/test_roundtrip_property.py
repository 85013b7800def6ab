"""Whatever the client accepts, the server stores: generated names, tags, keys, events, histograms
and values go through `shared.tracking` to a real server on SQLite and on PostgreSQL; each call
either fails in the caller or its item comes back unchanged, and nothing is refused later."""

from __future__ import annotations

import math

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import tracking
from tests.services.tracker.helpers import ServerThread

EDGE_TEXT = ["", " ", "x", " padded", "padded ", "moe ablation", "oracle=heuristic (stand-in)", "a" * 64, "a" * 65,
             "a" * 201, "tab\there", "nul\x00", "c1\x85", "lone\ud800", "emoji 🧪", "<script>alert(1)</script>",
             "router/maxvio/layer3", "loss", "per/layer[0]", "é/ü"]
ANY_CHAR = st.characters(exclude_categories=())  # surrogates and control characters included
TEXT = st.one_of(st.sampled_from(EDGE_TEXT), st.text(ANY_CHAR, max_size=40))
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**80), 2**80),
                   st.floats(allow_nan=True, allow_infinity=True), TEXT)
JSON = st.recursive(SCALAR, lambda c: st.lists(c, max_size=3) | st.dictionaries(TEXT, c, max_size=3), max_leaves=8)
NUMBER = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**1100), 2**1100))
STEP = st.one_of(st.none(), st.integers(-5, 2**54), st.floats(-1, 1e6))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def live(request, tmp_path_factory):
    from services.tracker.app import create_app
    from services.tracker.db import Base, make_engine
    from services.tracker.store import Store

    tmp = tmp_path_factory.mktemp("roundtrip")
    if request.param == "sqlite":
        url = f"sqlite:///{tmp}/tracker.db"
    else:
        url = request.getfixturevalue("pg_url")
        engine = make_engine(url)
        Base.metadata.drop_all(engine)
        engine.dispose()
    store = Store(url)
    srv = ServerThread(lambda: create_app(store=store)).start()
    srv.token, srv.spool = store.create_token("prop"), tmp / "spool"
    yield srv
    srv.stop()
    store.engine.dispose()


def _json_equal(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _try(fn, *args, **kwargs) -> bool:
    try:
        fn(*args, **kwargs)
        return True
    except (ValueError, TypeError):
        return False


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(project=TEXT, name=TEXT, tags=st.lists(TEXT, max_size=3), config=st.dictionaries(TEXT, JSON, max_size=3),
       metrics=st.dictionaries(TEXT, NUMBER, min_size=1, max_size=4), step=STEP,
       event=st.tuples(TEXT, TEXT, st.dictionaries(TEXT, JSON, max_size=3)),
       hist=st.tuples(TEXT, st.lists(NUMBER, max_size=6)), artifact=TEXT)
def test_every_item_the_client_accepts_is_stored_unchanged(live, project, name, tags, config, metrics, step, event,
                                                           hist, artifact):
    try:
        run = tracking.init(project=project or None, name=name or None, tags=tags, config=config, url=live.url,
                            token=live.token, spool_dir=str(live.spool), flush_interval=0.02)
    except (ValueError, TypeError):
        return  # refused in the caller, before anything was sent
    logged = _try(run.log, metrics, step=step)
    evented = _try(run.event, event[0], event[1], **event[2]) if "step" not in event[2] else False
    hist_ok = _try(run.log_histogram, hist[0], hist[1], step=0)
    art_ok = _try(run.artifact, "/nonexistent/path", name=artifact or None)
    run.finish(timeout=30)
    assert run.refused == [], run.refused
    assert not run._spool.exists() and not run._spool.rejected_path.exists()
    api = f"{live.url}/api/runs/{run.id}"
    info = httpx.get(api).json()
    assert info["status"] == "finished"
    assert info["project"] == (project or "moelab") and info["name"] == (name or run.id)
    assert info["tags"] == sorted(set(tags)) and _json_equal(info["config"], config)
    if logged:
        for key, value in metrics.items():
            s = httpx.get(f"{api}/series", params={"key": str(key)}).json()
            got = s["values"][-1]
            want = float(value)
            assert (got is None and not math.isfinite(want)) or got == want, (key, value, s)
    events = httpx.get(f"{api}/events").json()
    if evented:
        assert len(events) == 1 and events[0]["kind"] == event[0] and events[0]["message"] == event[1]
        assert _json_equal(events[0]["data"], event[2])
    if hist_ok:
        h = httpx.get(f"{api}/histograms", params={"key": hist[0]}).json()
        assert h["values"] == [[float(v) for v in hist[1]]]
    if art_ok:
        assert httpx.get(f"{api}/artifacts").json()[0]["name"] == (artifact or "path")

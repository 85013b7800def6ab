"""A live tracker on SQLite for the client's tests: yields a server with `.token`, `.store`, `.spool`."""

from __future__ import annotations

import pytest

from tests.services.tracker.helpers import ServerThread


@pytest.fixture
def tracker(tmp_path):
    from services.tracker.app import create_app
    from services.tracker.store import Store

    store = Store(f"sqlite:///{tmp_path}/tracker.db")
    token = store.create_token("test")
    srv = ServerThread(lambda: create_app(store=store)).start()
    srv.token, srv.store, srv.spool = token, store, tmp_path / "spool"
    yield srv
    if srv.server and not srv.server.should_exit:
        srv.stop()
    store.engine.dispose()


def start_run(srv, **kw):
    from shared import tracking

    kw.setdefault("token", srv.token)
    kw.setdefault("project", "t")
    kw.setdefault("flush_interval", 0.02)
    return tracking.init(url=srv.url, spool_dir=str(srv.spool), retry_max_s=0.2, **kw)

"""Fixtures: a tracker store on SQLite (always) and PostgreSQL (when Debian's postgresql is installed)."""

from __future__ import annotations

import pytest

from tests.services.tracker.helpers import PostgresCluster, ServerThread, pg_bin_dir


@pytest.fixture(scope="session")
def pg_url():
    if pg_bin_dir() is None:
        pytest.skip("PostgreSQL tests need Debian's postgresql package: apt-get install -y postgresql")
    cluster = PostgresCluster()
    try:
        url = cluster.start()
    except Exception as exc:  # a half-installed server is a failure worth reading, not a skip
        cluster.stop()
        raise RuntimeError(f"could not start a throwaway PostgreSQL in {cluster.dir}: {exc}") from exc
    yield url
    cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/tracker.db"
    url = request.getfixturevalue("pg_url")
    # one schema per test: drop every table so tests stay independent
    from services.tracker.db import Base, make_engine

    engine = make_engine(url)
    Base.metadata.drop_all(engine)
    engine.dispose()
    return url


@pytest.fixture
def server(tmp_path):
    """A live tracker on SQLite with one API token: yields (url, token, store)."""
    from services.tracker.app import create_app
    from services.tracker.store import Store

    store = Store(f"sqlite:///{tmp_path}/tracker.db")
    token = store.create_token("test")
    srv = ServerThread(lambda: create_app(store=store)).start()
    srv.token, srv.store = token, store
    yield srv
    srv.stop()
    store.engine.dispose()

"""Fixtures: a tracker store on SQLite (always) and PostgreSQL (when Debian's postgresql is installed)."""

from __future__ import annotations

import pytest

from tests.services.tracker.helpers import PostgresCluster, live_tracker, pg_bin_dir


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
    """A live tracker on SQLite with one API token: yields the server (url, token, store)."""
    with live_tracker(tmp_path) as srv:
        yield srv


@pytest.fixture(scope="session")
def dashboard(tmp_path_factory):
    """A live tracker holding the browser tests' runs: yields (url, ids)."""
    from tests.services.tracker import browser

    tmp = tmp_path_factory.mktemp("tracker-browser")
    with live_tracker(tmp, max_body_bytes=64 << 20) as srv:
        ids = browser.populate_runs(srv.url, srv.token, tmp / "spool")
        ids.update(browser.populate_pipeline(srv.url, srv.token, tmp / "spool"))
        ids["million"] = browser.populate_million(srv.url, srv.token)
        yield srv.url, ids


@pytest.fixture(scope="module")
def page():
    """One headless Chromium page per module; `page.errors` collects uncaught page errors."""
    import os

    from tests.services.tracker.browser import ARGS, ARTIFACTS, CHROMIUM

    if not os.path.exists(CHROMIUM):
        pytest.skip("browser tests need Debian's chromium: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        # bypass_csp: the page CSP forbids eval, which wait_for_function needs; escaping is tested without it
        pg = browser.new_page(viewport={"width": 1400, "height": 1000}, bypass_csp=True)
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.errors = errors
        yield pg
        browser.close()

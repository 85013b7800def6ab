"""The tracker's FastAPI app: REST API (OpenAPI at /docs, served without a CDN, and /openapi.json) and the dashboard pages.

`create_app` only assembles: the store, who may do what (`security`), the routes for runs
(`routes_runs`), for their data (`routes_data`) and the pages (`pages`). Request bodies above
`max_body_bytes` are refused with 413 unparsed; every other malformed body is a 422 (`validation`).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from services.tracker.docs_page import add_docs
from services.tracker.pages import STATIC, pages_router
from services.tracker.routes_data import data_router
from services.tracker.routes_runs import runs_router
from services.tracker.security import Access, HostAllowList
from services.tracker.store import Store

LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def create_app(
    db_url: str = "sqlite:///runs/tracker.db",
    read_protected: bool = False,
    max_body_bytes: int = 32 * 1024 * 1024,
    store: Store | None = None,
    allowed_hosts: list[str] | tuple[str, ...] = LOCAL_HOSTS,
    crash_after_s: float | None = None,
) -> FastAPI:
    """Build the app over a store at `db_url` (SQLite file or PostgreSQL URL), answering only
    requests whose Host is in `allowed_hosts` ('*' for any)."""
    store = store or Store(db_url)
    if crash_after_s is not None:
        store.crash_after_s = crash_after_s
    app = FastAPI(
        title="moelab tracker",
        version="1",
        description="Runs, metrics, histograms, events and artifacts of moelab experiments.",
        max_body_size=max_body_bytes,
        docs_url=None,
        redoc_url=None,
    )
    app.state.store = store
    access = Access(store, read_protected)

    @app.get("/healthz", tags=["meta"])
    def healthz() -> dict:
        return {"ok": True}

    app.include_router(runs_router(store, access))
    app.include_router(data_router(store, access))
    app.include_router(pages_router(store, access))
    add_docs(app)  # before /static: its assets live under /static/swagger
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(HostAllowList, allowed=list(allowed_hosts))
    return app

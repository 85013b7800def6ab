"""The tracker's FastAPI app: REST API (OpenAPI at /docs and /openapi.json) and the dashboard pages.

Security model (issue 7): every write needs `Authorization: Bearer <token>` with a token made by
`moelab tracker token` (only its SHA-256 is stored); reads are open unless `read_protected`.
Request bodies above `max_body_bytes` are refused with 413 (FastAPI's `max_body_size`) unparsed. Pages never
interpolate user data into HTML except through `html.escape`; the scripts insert it as text.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from services.tracker.schemas import KEY_RE, Batch, RunCreate, RunFinish
from services.tracker.store import NotFound, Store

STATIC = Path(__file__).parent / "static"


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


def create_app(
    db_url: str = "sqlite:///runs/tracker.db",
    read_protected: bool = False,
    max_body_bytes: int = 32 * 1024 * 1024,
    store: Store | None = None,
) -> FastAPI:
    """Build the app over a store at `db_url` (SQLite file or PostgreSQL URL)."""
    store = store or Store(db_url)
    app = FastAPI(
        title="moelab tracker",
        version="1",
        description="Runs, metrics, histograms, events and artifacts of moelab experiments.",
        max_body_size=max_body_bytes,
    )
    app.state.store = store

    def require_write(request: Request) -> None:
        token = _bearer(request)
        if not token:
            raise HTTPException(401, "writes need 'Authorization: Bearer <token>'; create one with `moelab tracker token`")
        if not store.token_valid(token):
            raise HTTPException(403, "unknown or revoked API token; create one with `moelab tracker token`")

    def require_read(request: Request) -> None:
        if read_protected:
            token = _bearer(request) or request.query_params.get("token")
            if not token or not store.token_valid(token):
                raise HTTPException(401, "reads are token-protected on this server: pass 'Authorization: Bearer <token>'")

    def not_found(fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None

    W = [Depends(require_write)]
    R = [Depends(require_read)]

    @app.get("/healthz", tags=["meta"])
    def healthz() -> dict:
        return {"ok": True}

    @app.post("/api/runs", dependencies=W, tags=["runs"], summary="Create a run, or resume it by id")
    def create_run(body: RunCreate) -> JSONResponse:
        run, resumed = store.create_or_resume(body)
        return JSONResponse({**run, "resumed": resumed}, status_code=200 if resumed else 201)

    @app.post("/api/runs/{run_id}/finish", dependencies=W, tags=["runs"])
    def finish_run(run_id: str, body: RunFinish) -> dict:
        return not_found(store.finish, run_id, body)

    @app.post("/api/runs/{run_id}/batch", dependencies=W, tags=["ingest"], summary="Batched ingest (idempotent per batch_id)")
    async def ingest(run_id: str, request: Request) -> dict:
        raw = await request.body()
        try:
            batch = Batch.model_validate_json(raw)
        except ValidationError as exc:
            raise HTTPException(422, json.loads(exc.json(include_url=False, include_input=False))) from None
        return await run_in_threadpool(not_found, store.ingest, run_id, batch)

    @app.delete("/api/runs/{run_id}", dependencies=W, tags=["runs"])
    def delete_run(run_id: str) -> dict:
        not_found(store.delete_run, run_id)
        return {"deleted": run_id}

    @app.get("/api/projects", dependencies=R, tags=["runs"])
    def projects() -> list:
        return store.projects()

    @app.get("/api/runs", dependencies=R, tags=["runs"], summary="List/search runs by project, status, tag, text")
    def list_runs(
        project: str | None = None,
        status: str | None = None,
        tag: Annotated[list[str] | None, Query()] = None,
        q: Annotated[str | None, Query(max_length=200)] = None,
        parent: str | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> dict:
        return store.list_runs(project, status, tag, q, parent, limit, offset)

    @app.get("/api/runs/{run_id}", dependencies=R, tags=["runs"])
    def get_run(run_id: str) -> dict:
        return not_found(store.get_run, run_id)

    @app.get("/api/runs/{run_id}/keys", dependencies=R, tags=["query"])
    def keys(run_id: str) -> dict:
        return not_found(store.keys, run_id)

    @app.get("/api/runs/{run_id}/series", dependencies=R, tags=["query"], summary="A series, min/max-downsampled")
    def series(
        run_id: str,
        key: Annotated[str, Query(pattern=KEY_RE)],
        points: Annotated[int, Query(ge=2, le=100_000)] = 2000,
    ) -> JSONResponse:
        # JSONResponse skips FastAPI's per-item response validation: 2,000-point payloads stay fast
        return JSONResponse(not_found(store.series, run_id, key, points))

    @app.get("/api/runs/{run_id}/histograms", dependencies=R, tags=["query"])
    def histograms(
        run_id: str,
        key: Annotated[str, Query(pattern=KEY_RE)],
        max_steps: Annotated[int, Query(ge=1, le=5000)] = 400,
    ) -> JSONResponse:
        return JSONResponse(not_found(store.histograms, run_id, key, max_steps))

    @app.get("/api/runs/{run_id}/events", dependencies=R, tags=["query"])
    def events(run_id: str, kind: str | None = None, limit: Annotated[int, Query(ge=1, le=10000)] = 1000) -> list:
        return store.events(run_id, kind, limit)

    @app.get("/api/runs/{run_id}/artifacts", dependencies=R, tags=["query"])
    def artifacts(run_id: str) -> list:
        return store.artifacts(run_id)

    @app.get("/api/compare", dependencies=R, tags=["query"], summary="The same keys of several runs, downsampled")
    def compare(
        runs: Annotated[list[str], Query(min_length=1, max_length=16)],
        key: Annotated[list[str], Query(min_length=1, max_length=32)],
        points: Annotated[int, Query(ge=2, le=100_000)] = 1000,
    ) -> JSONResponse:
        out: dict = {"runs": [], "series": {}}
        for run_id in runs:
            out["runs"].append(not_found(store.get_run, run_id))
            for k in key:
                try:
                    out["series"].setdefault(k, {})[run_id] = store.series(run_id, k, points)
                except NotFound:
                    pass
        return JSONResponse(out)

    @app.get("/api/diff", dependencies=R, tags=["query"], summary="Config differences between two runs")
    def diff(a: str, b: str) -> dict:
        return not_found(store.config_diff, a, b)

    # ---------------------------------------------------------------- pages
    def page(name: str, title: str = "moelab tracker") -> HTMLResponse:
        text = (STATIC / name).read_text().replace("{{title}}", html.escape(title, quote=True))
        return HTMLResponse(text, headers={"Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'"})

    @app.get("/", include_in_schema=False)
    def index() -> HTMLResponse:
        return page("index.html", "runs · moelab tracker")

    @app.get("/runs/{run_id}", include_in_schema=False)
    def run_page(run_id: str) -> Response:
        try:
            run = store.get_run(run_id)
        except NotFound:
            return page("run.html", f"unknown run {run_id}")
        return page("run.html", f"{run['name']} · moelab tracker")

    @app.get("/compare", include_in_schema=False)
    def compare_page() -> HTMLResponse:
        return page("compare.html", "compare · moelab tracker")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app

"""REST routes for a run's data: batched ingest and every query the dashboard makes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from services.tracker.routes_runs import found
from services.tracker.security import Access
from services.tracker.store import NotFound, Store
from services.tracker.validation import parse_batch
from shared.tracking.schema import KEY_RE, MAX_STEP, Batch

Step = Annotated[int | None, Query(ge=0, le=MAX_STEP)]
# what one compare request may read: a chart page's 64 keys x 8 runs x 2,000 points, and no more
MAX_COMPARE_POINTS = 1_024_000


def data_router(store: Store, access: Access) -> APIRouter:
    r = APIRouter()
    write, read = [Depends(access.need("write"))], [Depends(access.read)]

    @r.post("/api/runs/{run_id}/batch", dependencies=write, tags=["ingest"],
            summary="Batched ingest (idempotent per batch_id); invalid items are refused alone",
            openapi_extra={"requestBody": {"content": {"application/json": {"schema": Batch.model_json_schema()}}}})
    async def ingest(run_id: str, request: Request) -> dict:
        batch, refused = parse_batch(await request.body())
        return await run_in_threadpool(found, store.ingest, run_id, batch, refused)

    @r.get("/api/runs/{run_id}/keys", dependencies=read, tags=["query"])
    def keys(run_id: str) -> dict:
        return found(store.keys, run_id)

    @r.get("/api/runs/{run_id}/series", dependencies=read, tags=["query"],
           summary="A series, min/max-downsampled (whole, or the steps in [start, end] for a zoom)")
    def series(
        run_id: str,
        key: Annotated[str, Query(pattern=KEY_RE)],
        points: Annotated[int, Query(ge=2, le=100_000)] = 2000,
        start: Step = None,
        end: Step = None,
    ) -> JSONResponse:
        if start is not None and end is not None and end < start:
            raise HTTPException(422, f"end ({end}) must be >= start ({start})")
        # JSONResponse skips FastAPI's per-item response validation: 2,000-point payloads stay fast
        return JSONResponse(found(store.series, run_id, key, points, start, end))

    @r.get("/api/runs/{run_id}/histograms", dependencies=read, tags=["query"])
    def histograms(
        run_id: str,
        key: Annotated[str, Query(pattern=KEY_RE)],
        max_steps: Annotated[int, Query(ge=1, le=5000)] = 400,
    ) -> JSONResponse:
        return JSONResponse(found(store.histograms, run_id, key, max_steps))

    @r.get("/api/runs/{run_id}/events", dependencies=read, tags=["query"],
           summary="A page of the run's events in time order; the X-Total-Count header says how many match")
    def events(
        run_id: str,
        kind: str | None = None,
        exclude: Annotated[list[str] | None, Query(description="Kinds to leave out")] = None,
        limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> JSONResponse:
        page = found(store.events, run_id, kind, limit, offset, exclude)
        return JSONResponse(page["events"], headers={"X-Total-Count": str(page["total"])})

    @r.get("/api/runs/{run_id}/artifacts", dependencies=read, tags=["query"])
    def artifacts(run_id: str) -> list:
        return found(store.artifacts, run_id)

    @r.get("/api/compare", dependencies=read, tags=["query"],
           summary="The same keys of several runs, downsampled (runs x keys x points <= MAX_COMPARE_POINTS)")
    def compare(
        runs: Annotated[list[str], Query(min_length=1, max_length=32)],
        key: Annotated[list[str], Query(min_length=1, max_length=64)],
        points: Annotated[int, Query(ge=2, le=100_000)] = 1000,
        start: Step = None,
        end: Step = None,
    ) -> JSONResponse:
        runs, keys = list(dict.fromkeys(runs)), list(dict.fromkeys(key))  # a repeated run or key is read once
        asked = len(runs) * len(keys) * points
        if asked > MAX_COMPARE_POINTS:
            raise HTTPException(422, f"this asks for up to {asked:,} points ({len(runs)} runs x {len(keys)} keys x "
                                     f"{points:,} points); the limit is {MAX_COMPARE_POINTS:,}: ask for fewer keys "
                                     "per request or fewer points")
        out: dict = {"runs": [], "series": {}}
        for run_id in runs:
            out["runs"].append(found(store.get_run, run_id))
            for k in keys:
                try:
                    out["series"].setdefault(k, {})[run_id] = store.series(run_id, k, points, start, end)
                except NotFound:
                    pass
        return JSONResponse(out)

    @r.get("/api/diff", dependencies=read, tags=["query"], summary="Config differences between two runs")
    def diff(a: str, b: str) -> dict:
        return found(store.config_diff, a, b)

    return r

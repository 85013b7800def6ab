"""REST routes for runs: create/resume, finish, heartbeat, delete, list/search, lineage."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse

from services.tracker.security import Access
from services.tracker.store import Conflict, NotFound, RunQuery, Store
from services.tracker.validation import parse_body
from shared.tracking.schema import RunCreate, RunFinish

BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}}


def found(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from None


def runs_router(store: Store, access: Access) -> APIRouter:
    r = APIRouter()
    write, admin, read = [Depends(access.need("write"))], [Depends(access.need("admin"))], [Depends(access.read)]

    @r.post("/api/runs", dependencies=write, tags=["runs"], summary="Create a run, or resume it by id",
            openapi_extra={"requestBody": {"content": {"application/json": {"schema": RunCreate.model_json_schema()}}}})
    async def create_run(request: Request) -> JSONResponse:
        body = parse_body(RunCreate, await request.body())
        try:
            run, resumed = store.create_or_resume(body)
        except Conflict as exc:
            raise HTTPException(409, str(exc)) from None
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        return JSONResponse({**run, "resumed": resumed}, status_code=200 if resumed else 201)

    @r.post("/api/runs/{run_id}/finish", dependencies=write, tags=["runs"], openapi_extra=BODY)
    async def finish_run(run_id: str, request: Request) -> dict:
        return found(store.finish, run_id, parse_body(RunFinish, await request.body()))

    @r.post("/api/runs/{run_id}/heartbeat", dependencies=write, tags=["runs"],
            summary="The client is alive (runs silent for crash_after_s become crashed)")
    def heartbeat(run_id: str) -> dict:
        return found(store.heartbeat, run_id)

    @r.delete("/api/runs/{run_id}", dependencies=admin, tags=["runs"], summary="Delete a run (admin tokens only)")
    def delete_run(run_id: str) -> dict:
        found(store.delete_run, run_id)
        return {"deleted": run_id}

    @r.get("/api/projects", dependencies=read, tags=["runs"])
    def projects() -> list:
        return store.projects()

    @r.get("/api/runs", dependencies=read, tags=["runs"],
           summary="The runs table: filter (project, status, tag, text, parent, config), sort, page, chosen "
                   "metric/config columns; `changed_after` returns only runs changed since a previous answer's `now`")
    def list_runs(
        project: str | None = None,
        status: str | None = None,
        tag: Annotated[list[str] | None, Query()] = None,
        tag_mode: Annotated[Literal["all", "any"], Query(description="all: runs with every tag; any: with one")] = "all",
        q: Annotated[str | None, Query(max_length=200)] = None,
        parent: str | None = None,
        top: Annotated[bool, Query(description="Only runs without a parent")] = False,
        config: Annotated[list[str] | None, Query(description="path=value conditions on the config")] = None,
        sort: Annotated[str, Query(max_length=300, description="created, name, status, updated, metric:<key> "
                                                                "or config:<path>")] = "created",
        desc: bool = True,
        metric: Annotated[list[str] | None, Query(max_length=32, description="Keys whose last value to add")] = None,
        column: Annotated[list[str] | None, Query(max_length=32, description="Config paths to add")] = None,
        brief: Annotated[bool, Query(description="Leave each run's whole config out")] = False,
        changed_after: Annotated[float | None, Query(description="Only runs updated after this server time")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> JSONResponse:
        query = RunQuery(project=project, status=status, tags=tag or [], tag_mode=tag_mode, q=q, parent=parent, top=top,
                         config=config or [], sort=sort, desc=desc, metrics=metric or [], columns=column or [],
                         brief=brief, changed_after=changed_after, limit=limit, offset=offset)
        try:
            return JSONResponse(store.run_table(query))
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None

    @r.get("/api/runs/{run_id}", dependencies=read, tags=["runs"])
    def get_run(run_id: str) -> dict:
        return found(store.get_run, run_id)

    @r.get("/api/runs/{run_id}/children", dependencies=read, tags=["runs"],
           summary="Child runs (a pipeline's stages) with their figures and their own children")
    def children(run_id: str) -> list:
        return found(store.children, run_id)

    return r

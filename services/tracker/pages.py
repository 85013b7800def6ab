"""Dashboard pages and the login that opens a read session on a `read_protected` server.

Pages are static HTML; the only user data a page carries is the run name in an open server's
`<title>` (through `html.escape`); the scripts insert everything else as text. On a protected
server a request without a valid session or token gets the login page and nothing else.
"""

from __future__ import annotations

import html
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from services.tracker.security import SESSION_COOKIE, Access
from services.tracker.store import NotFound, Store
from services.tracker.store.auth import SESSION_DAYS
from services.tracker.validation import parse_body
from shared.tracking.schema import Strict

STATIC = Path(__file__).parent / "static"
CSP = "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"


class Login(Strict):
    token: str


# every page is one template (static/page.html) with its own scripts, in load order
SCRIPTS = {
    "index": ["common.js", "index.js"],
    "run": ["common.js", "chart.js", "widgets.js", "reports.js", "run_charts.js", "run.js"],
    "compare": ["common.js", "chart.js", "groups.js", "compare.js"],
    "login": ["common.js", "login.js"],
}


def page(name: str, title: str = "moelab tracker", status: int = 200) -> HTMLResponse:
    scripts = "\n".join(f'<script src="/static/{s}"></script>' for s in SCRIPTS[name])
    text = ((STATIC / "page.html").read_text().replace("{{page}}", name).replace("{{scripts}}", scripts)
            .replace("{{title}}", html.escape(title, quote=True)))
    return HTMLResponse(text, status_code=status, headers={"Content-Security-Policy": CSP,
                                                           "Referrer-Policy": "no-referrer"})


def pages_router(store: Store, access: Access) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    def guarded(request: Request, name: str, title: str) -> HTMLResponse:
        if not access.can_read(request):
            return page("login", "log in · moelab tracker", status=401)
        return page(name, title)

    @r.get("/favicon.ico")
    def favicon() -> Response:
        return Response(status_code=204)

    @r.get("/")
    def index(request: Request) -> HTMLResponse:
        return guarded(request, "index", "runs · moelab tracker")

    @r.get("/runs/{run_id}")
    def run_page(request: Request, run_id: str) -> Response:
        if not access.can_read(request):
            return page("login", "log in · moelab tracker", status=401)
        try:
            run = store.get_run(run_id)
        except NotFound:  # the page itself says so too (its script reads the 404 of /api/runs/<id>)
            return page("run", f"unknown run {run_id}", status=404)
        return page("run", f"{run['name']} · moelab tracker")

    @r.get("/compare")
    def compare_page(request: Request) -> HTMLResponse:
        return guarded(request, "compare", "compare · moelab tracker")

    @r.post("/api/session")
    async def login(request: Request) -> JSONResponse:
        """Trade a token for a read session (HttpOnly cookie); the token itself is not kept."""
        sid = store.open_session(parse_body(Login, await request.body()).token)
        if sid is None:
            raise HTTPException(403, "unknown or revoked API token")
        resp = JSONResponse({"ok": True})
        resp.set_cookie(SESSION_COOKIE, sid, max_age=SESSION_DAYS * 86400, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path="/")
        return resp

    @r.delete("/api/session")
    def logout(request: Request) -> JSONResponse:
        sid = request.cookies.get(SESSION_COOKIE)
        if sid:
            store.close_session(sid)
        resp = JSONResponse({"ok": True})
        resp.delete_cookie(SESSION_COOKIE, path="/")
        return resp

    @r.get("/api/session")
    def session(request: Request) -> dict:
        return {"read_protected": access.read_protected, "can_read": access.can_read(request)}

    return r

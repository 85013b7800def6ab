"""Who may do what: bearer tokens with scopes, dashboard sessions, and the Host allow-list.

- Writes (create, ingest, finish, heartbeat) need `Authorization: Bearer <token>` of scope write
  or admin; deleting a run needs admin. Tokens are never read from URLs (they would end up in
  proxy logs, browser history and Referer headers).
- Reads are open unless `read_protected`; then they need a token of any scope, or the dashboard's
  session cookie: the login form trades a token for a random session id kept in an HttpOnly,
  SameSite=Strict cookie, so page scripts never hold the token and other sites cannot use it. A
  session only reads, and revoking its token ends it.
- Host allow-list: a browser visiting an attacker's domain that resolves to 127.0.0.1 (DNS
  rebinding) sends that domain as Host; answering only the names this server is known by keeps
  such a page from reading an open tracker.
"""

from __future__ import annotations

import json

from fastapi import HTTPException, Request
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from services.tracker.store import Store, scope_allows

SESSION_COOKIE = "moelab_session"


def bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() or None if auth.lower().startswith("bearer ") else None


class Access:
    def __init__(self, store: Store, read_protected: bool):
        self.store, self.read_protected = store, read_protected

    def can_read(self, request: Request) -> bool:
        if not self.read_protected:
            return True
        token = bearer(request)
        if token:
            return self.store.token_scope(token) is not None
        sid = request.cookies.get(SESSION_COOKIE)
        return bool(sid) and self.store.session_valid(sid)

    def read(self, request: Request) -> None:
        """Dependency of every read endpoint."""
        if not self.can_read(request):
            raise HTTPException(401, "reads are token-protected on this server: pass 'Authorization: Bearer <token>' "
                                     "or log in on the dashboard")

    def need(self, scope: str):
        """A dependency requiring a bearer token of at least `scope`.

        Async, with the database asked in a worker thread only when the token is not in the scope
        cache: FastAPI runs a sync dependency in its thread pool, which cost every ingest request a
        second thread hop besides the store's own."""

        async def check(request: Request) -> None:
            token = bearer(request)
            if not token:
                raise HTTPException(401, f"this needs 'Authorization: Bearer <token>' with scope {scope}; "
                                         "create one with `moelab tracker token`")
            have = self.store.cached_token_scope(token) or await run_in_threadpool(self.store.token_scope, token)
            if have is None:
                raise HTTPException(403, "unknown or revoked API token; create one with `moelab tracker token`")
            if not scope_allows(have, scope):
                raise HTTPException(403, f"a {have} token cannot do this; it needs scope {scope} "
                                         f"(`moelab tracker token --scope {scope}`)")

        return check


def _host_of(header: str) -> str:
    header = header.strip().lower()
    if header.startswith("["):  # [::1]:8000
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class HostAllowList:
    """ASGI middleware: 400 for a request whose Host is not an allowed name ('*' allows any;
    '*.example.org' allows its subdomains)."""

    def __init__(self, app: ASGIApp, allowed: list[str]):
        self.app = app
        self.any = "*" in allowed
        self.exact = {h.lower().strip("[]") for h in allowed if not h.startswith("*")}
        self.suffixes = tuple(h[1:].lower() for h in allowed if h.startswith("*."))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.any or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
        host = _host_of(raw)
        if host in self.exact or (self.suffixes and host.endswith(self.suffixes)):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"detail": f"Host {raw!r} is not one this tracker answers (tracker.allowed_hosts); "
                                     "add it with `moelab tracker serve --allowed-host NAME`"}).encode()
        await send({"type": "http.response.start", "status": 400,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

"""API tokens and dashboard sessions: scopes, hashing, revocation.

Only the SHA-256 of a token (or of a session id) is stored, so a copy of the database gives no
access. Scopes are ordered read < write < admin: reads (when the server protects them) need read,
ingest needs write, deleting runs needs admin. A positive check is remembered for
`TOKEN_CACHE_S` seconds (one query per client per few seconds rather than one per batch), so a
token revoked from another process (`moelab tracker token --revoke`) stops working within that
time; one revoked through this store stops at once.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

from sqlalchemy import delete, func, or_, select, update

from services.tracker.db import ApiToken, BrowserSession
from services.tracker.store.base import StoreBase

SCOPES = ("read", "write", "admin")
TOKEN_CACHE_S = 5.0
SESSION_DAYS = 30


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def scope_allows(have: str | None, need: str) -> bool:
    return have in SCOPES and SCOPES.index(have) >= SCOPES.index(need)


class TokenStore(StoreBase):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._scope_cache: dict[str, tuple[float, str]] = {}

    def create_token(self, name: str = "default", scope: str = "write") -> str:
        if scope not in SCOPES:
            raise ValueError(f"token scope must be one of {', '.join(SCOPES)}, got {scope!r}")
        token = "mlt_" + secrets.token_urlsafe(32)
        with self.writing() as s:
            s.add(ApiToken(name=name, token_hash=hash_token(token), created=time.time(), scope=scope))
        return token

    def cached_token_scope(self, token: str) -> str | None:
        """The scope of a token checked within the last TOKEN_CACHE_S seconds, else None (unknown here:
        ask `token_scope`). No database access, so the server can answer it without a worker thread."""
        hit = self._scope_cache.get(hash_token(token))
        return hit[1] if hit and hit[0] > time.monotonic() else None

    def token_scope(self, token: str) -> str | None:
        """The scope of a known, unrevoked token, else None."""
        cached = self.cached_token_scope(token)
        if cached:
            return cached
        digest = hash_token(token)
        now = time.monotonic()
        with self.reading() as s:
            row = s.scalar(select(ApiToken).where(ApiToken.token_hash == digest))
            scope = row.scope if row is not None and not row.revoked else None
        if scope:
            self._scope_cache[digest] = (now + TOKEN_CACHE_S, scope)
        return scope

    def token_valid(self, token: str, need: str = "write") -> bool:
        return scope_allows(self.token_scope(token), need)

    def count_tokens(self) -> int:
        with self.reading() as s:
            return s.scalar(select(func.count()).select_from(ApiToken).where(ApiToken.revoked.is_(False))) or 0

    def list_tokens(self) -> list[dict[str, Any]]:
        with self.reading() as s:
            rows = s.scalars(select(ApiToken).order_by(ApiToken.id)).all()
            return [{"id": t.id, "name": t.name, "scope": t.scope, "created": t.created, "revoked": t.revoked}
                    for t in rows]

    def revoke_tokens(self, which: str) -> int:
        """Revoke by token id, by name (every token of that name) or by the token itself; ends their
        sessions. Returns how many tokens were revoked."""
        cond = [ApiToken.name == which, ApiToken.token_hash == hash_token(which)]
        if which.isdigit():
            cond.append(ApiToken.id == int(which))
        with self.writing() as s:
            ids = s.scalars(select(ApiToken.id).where(or_(*cond), ApiToken.revoked.is_(False))).all()
            if ids:
                s.execute(update(ApiToken).where(ApiToken.id.in_(ids)).values(revoked=True))
                s.execute(delete(BrowserSession).where(BrowserSession.token_id.in_(ids)))
        self._scope_cache.clear()
        return len(ids)

    # ---------------------------------------------------------------- browser sessions
    def open_session(self, token: str) -> str | None:
        """A new read-only session id for a valid token (any scope), or None."""
        digest = hash_token(token)
        with self.writing() as s:
            row = s.scalar(select(ApiToken).where(ApiToken.token_hash == digest, ApiToken.revoked.is_(False)))
            if row is None:
                return None
            sid = "mls_" + secrets.token_urlsafe(32)
            now = time.time()
            s.add(BrowserSession(session_hash=hash_token(sid), token_id=row.id, created=now,
                                 expires=now + SESSION_DAYS * 86400))
            return sid

    def session_valid(self, sid: str) -> bool:
        with self.reading() as s:
            row = s.execute(
                select(BrowserSession.expires, ApiToken.revoked)
                .join(ApiToken, ApiToken.id == BrowserSession.token_id)
                .where(BrowserSession.session_hash == hash_token(sid))
            ).first()
        return row is not None and row[0] > time.time() and not row[1]

    def close_session(self, sid: str) -> None:
        with self.writing() as s:
            s.execute(delete(BrowserSession).where(BrowserSession.session_hash == hash_token(sid)))

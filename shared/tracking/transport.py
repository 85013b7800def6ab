"""Sending one op (init, batch, finish) to the tracker, and what each answer means for the op.

- delivered (2xx): done; items the server refused one by one (`refused` in its answer) go to the
  rejected log, the rest of the batch is stored.
- `Unreachable` (network error, 401/403, 429, 502-504): the op stays in the spool and is retried
  with back-off, or by `moelab tracker sync` later (e.g. with a valid token).
- a 413 (body too large) splits a batch in two halves, recursively, down to single items; a single
  item that is still too large is refused alone.
- a 500 is retried a few times, then refused: a server error that repeats is a bug that would
  otherwise block every later op of the run behind it.
- any other 4xx: the op is refused (kept in the rejected log with the server's reason, never
  retried in a loop).
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson

from shared.tracking.direct_http import NO_ANSWER, Answer, DirectClient, environment_names_a_proxy

SERVER_ERROR_ATTEMPTS = 3
CONNECT_TIMEOUT = 3.0
TRANSIENT = {429, 502, 503, 504}


class Unreachable(Exception):
    """Worth retrying later: the op stays in the spool."""


class Rejected(Exception):
    """The server refused the op as it is; retrying it unchanged cannot help."""


class TooLarge(Rejected):
    """413: the body is over the server's limit."""


def op_path(op: dict[str, Any]) -> str:
    kind, run_id = op["op"], op["run"]
    return {"init": "/api/runs", "batch": f"/api/runs/{run_id}/batch", "finish": f"/api/runs/{run_id}/finish"}[kind]


_TLS_LOCK = threading.Lock()
_TLS: list[ssl.SSLContext] = []


def tls_context() -> ssl.SSLContext:
    """httpx's default verifying TLS context, made once per process and shared by every run's
    client: loading the CA bundle costs ~25 ms of CPU, which a client per run paid again. Made
    under a lock: runs that start together would otherwise each load the bundle."""
    with _TLS_LOCK:
        if not _TLS:
            _TLS.append(httpx.create_ssl_context())
        return _TLS[0]


def encode_body(op: dict[str, Any]) -> bytes | str:
    """An op's body as JSON text. A batch of scalars alone goes through orjson: encoding its float
    columns was the client's largest cost at 1,000 points a request, and its values are finite
    floats or the agreed NaN/Infinity strings by construction (`Run.log` encodes them), so no NaN
    can reach orjson, which would write it as null. Anything else (a run's config, events,
    histograms, artifacts) goes through `json` with NaN refused."""
    body = op["body"]
    if op["op"] == "batch" and not (body.get("histograms") or body.get("events") or body.get("artifacts")):
        return orjson.dumps(body)
    return json.dumps(body, allow_nan=False)


class Transport:
    """One HTTP client to the tracker (made on first use, in the thread that uses it): a direct
    client on httpcore's pool, or httpx's when the environment names a proxy."""

    def __init__(self, url: str, token: str | None, timeout: float = 30.0):
        self.headers = {"content-type": "application/json"}
        if token:
            self.headers["authorization"] = f"Bearer {token}"
        self.url, self.timeout = url.rstrip("/"), timeout
        self.client: DirectClient | httpx.Client | None = None

    def _new_client(self) -> DirectClient | httpx.Client:
        if environment_names_a_proxy():
            return httpx.Client(base_url=self.url, headers=self.headers, verify=tls_context(),
                                timeout=httpx.Timeout(self.timeout, connect=CONNECT_TIMEOUT))
        return DirectClient(self.url, self.headers, self.timeout, CONNECT_TIMEOUT,
                            tls_context() if self.url.startswith("https:") else None)

    def _post(self, path: str, content: str | bytes) -> Answer | httpx.Response:
        if self.client is None:
            self.client = self._new_client()
        try:
            return self.client.post(path, content=content)
        except (httpx.HTTPError, *NO_ANSWER) as exc:
            raise Unreachable(f"{type(exc).__name__}: {exc}") from None

    def send(self, op: dict[str, Any]) -> dict[str, Any]:
        """POST one op; the server's JSON answer, or one of the exceptions above."""
        content = encode_body(op)
        for attempt in range(SERVER_ERROR_ATTEMPTS):
            resp = self._post(op_path(op), content)
            code = resp.status_code
            if code < 400:
                try:
                    return resp.json()
                except ValueError:
                    return {}
            detail = f"HTTP {code} for {op['op']}: {resp.text[:1000]}"
            if code in (401, 403) or code in TRANSIENT or code > 500:
                raise Unreachable(detail)
            if code == 413:
                raise TooLarge(detail)
            if code < 500:
                raise Rejected(detail)
            if attempt == SERVER_ERROR_ATTEMPTS - 1:
                raise Rejected(f"{detail} (after {SERVER_ERROR_ATTEMPTS} attempts)")
            time.sleep(0.5 * 2**attempt)
        raise AssertionError("unreachable")

    def heartbeat(self, run_id: str) -> bool:
        """Tell the server the run is alive (it marks runs that stop sending these `crashed`)."""
        try:
            return self._post(f"/api/runs/{run_id}/heartbeat", "{}").status_code < 400
        except Unreachable:
            return False

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


def split_batch(op: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Two halves of a batch op (by items, then by points), or None when it holds one item only.

    The halves' batch ids derive from the original's, so a split replayed after a lost answer is
    split the same way and each half is still stored once."""
    body = op["body"]
    items: list[tuple[str, Any]] = [("metrics", (k, v)) for k, v in body.get("metrics", {}).items()]
    for field in ("histograms", "events", "artifacts"):
        items += [(field, x) for x in body.get(field, [])]
    if len(items) == 1 and items[0][0] == "metrics":
        key, pts = items[0][1]
        n = len(pts["steps"])
        if n < 2:
            return None
        half = n // 2
        halves = [[("metrics", (key, {c: pts[c][:half] for c in ("steps", "walls", "values")}))],
                  [("metrics", (key, {c: pts[c][half:] for c in ("steps", "walls", "values")}))]]
    elif len(items) < 2:
        return None
    else:
        half = len(items) // 2
        halves = [items[:half], items[half:]]
    out = []
    for suffix, part in zip("ab", halves, strict=True):
        new = {"batch_id": f"{body['batch_id']}{suffix}"[:64], "metrics": {}, "histograms": [], "events": [],
               "artifacts": []}
        for field, x in part:
            if field == "metrics":
                new["metrics"][x[0]] = x[1]
            else:
                new[field].append(x)
        out.append({"op": "batch", "run": op["run"], "body": new})
    return out


def refused_part(op: dict[str, Any], refused: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch op holding only the items the server refused (named `metrics.<key>`, `events[3]`…)."""
    body = op["body"]
    new: dict[str, Any] = {"batch_id": (body["batch_id"] + "r")[:64], "metrics": {}, "histograms": [], "events": [],
                           "artifacts": []}
    for r in refused:
        where = r.get("item", "")
        if where.startswith("metrics.") and where[8:] in body.get("metrics", {}):
            new["metrics"][where[8:]] = body["metrics"][where[8:]]
            continue
        field, _, index = where.partition("[")
        if field in ("histograms", "events", "artifacts") and index.rstrip("]").isdigit():
            i = int(index.rstrip("]"))
            if i < len(body.get(field, [])):
                new[field].append(body[field][i])
    return {"op": "batch", "run": op["run"], "body": new}


def batch_points(body: dict[str, Any]) -> int:
    """Scalar points a batch body carries."""
    return sum(len(v.get("steps", ())) for v in body.get("metrics", {}).values())


def deliver(transport: Transport, op: dict[str, Any], refuse: Callable[[dict, str, list | None], None]) -> int:
    """Send `op`; a refused op or item goes to `refuse(op, reason, items)`. Raises `Unreachable`.

    Returns the scalar points of `op` the server holds now: all of a batch it took (a duplicate
    batch id means an earlier copy was stored), less the items it refused."""
    try:
        reply = transport.send(op)
    except TooLarge as exc:
        parts = split_batch(op) if op["op"] == "batch" else None
        if parts is None:
            refuse(op, str(exc), None)
            return 0
        return sum(deliver(transport, part, refuse) for part in parts)
    except Rejected as exc:
        refuse(op, str(exc), None)
        return 0
    stored = batch_points(op["body"]) if op["op"] == "batch" else 0
    refused = reply.get("refused") if isinstance(reply, dict) else None
    if refused:
        part = refused_part(op, refused)
        reason = "; ".join(f"{r.get('item')}: {r.get('error')}" for r in refused)
        refuse(part, f"the server refused {len(refused)} item(s): {reason}", refused)
        stored -= batch_points(part["body"])
    return stored

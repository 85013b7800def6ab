"""POSTs to the tracker straight over httpcore's connection pool, below httpx's client layer.

A run sends one small JSON body per flush to one server and reads a small JSON answer: none of
httpx's client features (cookies, redirects, auth flows, content decoding, URL merging, event
hooks) applies, yet building and dispatching through that layer cost about a sixth of the client's
CPU at the benchmark's request rate. The pool underneath is the same one httpx uses, with the same
TLS context and timeouts. httpx stays the path whenever the environment names a proxy, so proxy
rules (`HTTPS_PROXY`, `NO_PROXY`, …) keep httpx's exact meaning instead of a second reading of them.
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from typing import Any

import httpcore

# Everything httpcore raises for a request that did not get an answer; httpx maps the same set to
# its `HTTPError`, which the transport treats as "unreachable, retry later".
NO_ANSWER = (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError,
             httpcore.ConnectionNotAvailable, httpcore.UnsupportedProtocol, httpcore.ProxyError)


def environment_names_a_proxy() -> bool:
    """True when HTTP(S)_PROXY / ALL_PROXY (any case) is set: such runs go through httpx."""
    proxies = urllib.request.getproxies()
    return any(proxies.get(scheme) for scheme in ("http", "https", "all"))


class Answer:
    """The parts of an HTTP answer the transport reads (httpx.Response has the same three)."""

    def __init__(self, status_code: int, content: bytes):
        self.status_code, self.content = status_code, content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class DirectClient:
    """A keep-alive client for one tracker URL; `post` returns an `Answer` or raises one of
    `NO_ANSWER`. Safe to share between threads (the pool is), as the httpx client it replaces was."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout: float, connect_timeout: float,
                 ssl_context: ssl.SSLContext | None):
        url = httpcore.URL(base_url)
        self.scheme, self.host, self.port = url.scheme, url.host, url.port
        self.prefix = url.target.rstrip(b"/")
        host = b"[" + self.host + b"]" if b":" in self.host else self.host  # an IPv6 literal
        host = host if self.port is None else host + b":" + str(self.port).encode()
        self.headers = [(b"host", host), (b"accept", b"*/*"), (b"user-agent", b"moelab-tracking")]
        self.headers += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        self.timeouts = {"connect": connect_timeout, "read": timeout, "write": timeout, "pool": timeout}
        self.pool = httpcore.ConnectionPool(ssl_context=ssl_context if self.scheme == b"https" else None)

    def post(self, path: str, content: str | bytes) -> Answer:
        body = content.encode() if isinstance(content, str) else content
        url = httpcore.URL(scheme=self.scheme, host=self.host, port=self.port, target=self.prefix + path.encode())
        headers = [*self.headers, (b"content-length", str(len(body)).encode())]
        resp = self.pool.request("POST", url, headers=headers, content=body,
                                 extensions={"timeout": self.timeouts})
        return Answer(resp.status, resp.content)

    def close(self) -> None:
        self.pool.close()

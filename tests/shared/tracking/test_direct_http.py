"""The transport's direct client: what goes on the wire, what comes back, and when httpx takes over."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from shared.tracking.direct_http import DirectClient
from shared.tracking.transport import Rejected, Transport, Unreachable

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


class Recorder(BaseHTTPRequestHandler):
    """Answers every POST with a status and JSON chosen by the test, and keeps what it was sent."""

    protocol_version = "HTTP/1.1"  # keeps connections open, as the tracker's server does
    seen: list[dict] = []
    status = 200
    answer = b'{"stored": 3}'

    def do_POST(self):  # noqa: N802 (the stdlib's name)
        body = self.rfile.read(int(self.headers["content-length"]))
        Recorder.seen.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                              "body": body, "client_port": self.client_address[1]})
        self.send_response(Recorder.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(Recorder.answer)))
        self.end_headers()
        self.wfile.write(Recorder.answer)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch):
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    Recorder.seen, Recorder.status, Recorder.answer = [], 200, b'{"stored": 3}'
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _op():
    return {"op": "batch", "run": "r1", "body": {"batch_id": "b", "metrics": {"loss": {
        "steps": [0, 1], "walls": [1.0, 2.0], "values": [2.5, 2.25]}}, "histograms": [], "events": [], "artifacts": []}}


def test_a_batch_arrives_whole_under_the_urls_path_prefix_with_its_token(server):
    transport = Transport(server + "/tracker/", "tok")
    assert transport.send(_op()) == {"stored": 3}
    assert isinstance(transport.client, DirectClient)
    (req,) = Recorder.seen
    assert req["path"] == "/tracker/api/runs/r1/batch"
    assert json.loads(req["body"]) == _op()["body"]
    assert req["headers"]["host"] == server.removeprefix("http://")
    assert req["headers"]["authorization"] == "Bearer tok"
    assert req["headers"]["content-type"] == "application/json"
    transport.close()


def test_the_connection_is_kept_alive_between_posts(server):
    client = DirectClient(server, {}, timeout=5.0, connect_timeout=1.0, ssl_context=None)
    for _ in range(3):
        assert client.post("/x", "{}").status_code == 200
    assert len({req["client_port"] for req in Recorder.seen}) == 1
    client.close()


def test_answers_mean_what_they_meant_through_httpx(server):
    """A 4xx is refused with the server's text, a 503 is retried later; as with httpx's client."""
    transport = Transport(server, None)
    Recorder.status, Recorder.answer = 422, b'{"detail": "bad key"}'
    with pytest.raises(Rejected, match="HTTP 422 for batch: .*bad key"):
        transport.send(_op())
    Recorder.status = 503
    with pytest.raises(Unreachable, match="HTTP 503"):
        transport.send(_op())
    Recorder.status, Recorder.answer = 200, b"not json"
    assert transport.send(_op()) == {}
    transport.close()


def test_a_server_that_is_not_there_is_unreachable_not_an_error(monkeypatch):
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    transport = Transport(f"http://127.0.0.1:{port}", None)
    with pytest.raises(Unreachable, match="ConnectError"):
        transport.send(_op())
    assert transport.heartbeat("r1") is False


def test_a_proxy_named_in_the_environment_is_used_through_httpx(server, monkeypatch):
    """The recorder plays the proxy: a proxied request names the whole target URL in its path."""
    monkeypatch.setenv("HTTP_PROXY", server)
    transport = Transport("http://tracker.invalid:9000", None)
    assert transport.send(_op()) == {"stored": 3}
    assert isinstance(transport.client, httpx.Client)
    (req,) = Recorder.seen
    assert req["path"] == "http://tracker.invalid:9000/api/runs/r1/batch"
    transport.close()

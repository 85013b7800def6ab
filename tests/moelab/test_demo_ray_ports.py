"""`moelab demo` starts its Ray head on ports nothing else holds (another Ray on the machine keeps
the defaults, and a dashboard agent that cannot bind its port leaves a head that runs no job)."""

from __future__ import annotations

import socket

from moelab.commands import demo


def test_ray_head_gets_free_gcs_and_agent_ports_even_when_the_defaults_are_taken(monkeypatch, tmp_path):
    held = []
    for port in (6379, 52365):  # what another Ray cluster on the machine would hold
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            held.append(sock)
        except OSError:
            sock.close()  # already held by something else: just as good for this test
    started: list[list[str]] = []
    answers = iter([False, True])  # no head yet; then the one just started answers
    monkeypatch.setattr(demo, "_http_ok", lambda url: next(answers))
    monkeypatch.setattr(demo, "RAY_TEMP", str(tmp_path / "ray"))
    monkeypatch.setattr(demo.subprocess, "run", lambda cmd, **kw: started.append(cmd))
    try:
        demo.ensure_ray(2)
    finally:
        for sock in held:
            sock.close()
    (cmd,) = started
    flags = dict(arg.lstrip("-").split("=", 1) for arg in cmd if arg.startswith("--") and "=" in arg)
    ports = {int(flags["port"]), int(flags["dashboard-agent-listen-port"])}
    assert len(ports) == 2 and not ports & {6379, 52365}
    assert flags["temp-dir"] == str(tmp_path / "ray")

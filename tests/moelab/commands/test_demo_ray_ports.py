"""`moelab demo` starts its Ray head on ports nothing else holds (another Ray on the machine keeps
the defaults, and a dashboard agent that cannot bind its port leaves a head that runs no job)."""

from __future__ import annotations

import socket

from moelab.commands.demo import RayHead


def test_ray_head_gets_free_gcs_agent_and_client_ports_even_when_the_defaults_are_taken():
    held = []
    for port in (6379, 52365, 10001):  # what another Ray cluster on the machine would hold
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            held.append(sock)
        except OSError:
            sock.close()  # already held by something else: just as good for this test
    try:
        argv = RayHead().start_argv("ray", 2)
    finally:
        for sock in held:
            sock.close()
    flags = dict(arg.lstrip("-").split("=", 1) for arg in argv if arg.startswith("--") and "=" in arg)
    ports = {int(flags[k]) for k in ("port", "dashboard-agent-listen-port", "ray-client-server-port")}
    assert len(ports) == 3 and not ports & {6379, 52365, 10001}
    assert flags["dashboard-port"] == "8265" and flags["temp-dir"] == "/tmp/moelab-demo-ray"
    pinned = RayHead(gcs_port=7001, agent_port=7002, client_port=7003).start_argv("ray", 2)
    assert {"--port=7001", "--dashboard-agent-listen-port=7002", "--ray-client-server-port=7003"} <= set(pinned)

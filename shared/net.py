"""Free local TCP ports, for processes this machine starts (gloo rendezvous, Ray, the tracker)."""

from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports nothing listens on now (the OS's picks for port 0, all held open
    until every one is chosen, so no two are the same). Another process may still take one
    before it is used: callers bind soon after."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    """One TCP port nothing listens on now."""
    return free_ports(1)[0]

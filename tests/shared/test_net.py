"""Free local ports: distinct, and bindable right after they are chosen."""

from __future__ import annotations

import socket

from shared.net import free_port, free_ports


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(6)
    assert len(set(ports)) == 6
    socks = []
    try:
        for port in ports:
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", port))
    finally:
        for s in socks:
            s.close()


def test_free_port_is_a_port_number():
    assert 0 < free_port() < 65536

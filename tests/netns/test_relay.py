"""The loopback relay (pattern 1 in docs/testing.md) against a plain TCP echo server."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from local_ccm.netlink import run_in_netns
from tests.support.netns import NetnsFactory
from tests.support.relay import LoopbackRelay
from tests.support.waiting import eventually


@pytest.fixture
def echo_server() -> Iterator[tuple[str, int]]:
    """A TCP echo server on the test process's loopback; echoes until the client half-closes."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[:2]
    finally:
        server.shutdown(socket.SHUT_RDWR)
        server.close()


def _connect_inside(ns: str, port: int) -> socket.socket:
    sock = run_in_netns(ns, lambda: socket.create_connection(("127.0.0.1", port), timeout=5))
    sock.settimeout(5)
    return sock


def _round_trip(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    sock.shutdown(socket.SHUT_WR)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_relay_carries_bytes_both_ways_and_passes_half_close(
    netns: NetnsFactory, echo_server: tuple[str, int]
) -> None:
    ns = netns()
    with pytest.raises(ConnectionRefusedError):  # the namespace has its own, empty loopback
        _connect_inside(ns.name, echo_server[1])

    with LoopbackRelay(ns.name, echo_server) as relay, _connect_inside(ns.name, relay.port) as sock:
        payload = bytes(range(256)) * 1024  # larger than one socket buffer

        assert relay.port == echo_server[1]
        assert _round_trip(sock, payload) == payload


def test_relay_serves_concurrent_connections_on_a_chosen_port(
    netns: NetnsFactory, echo_server: tuple[str, int]
) -> None:
    ns = netns()
    with LoopbackRelay(ns.name, echo_server, port=0) as relay:
        socks = [_connect_inside(ns.name, relay.port) for _ in range(3)]
        for index, sock in enumerate(socks):
            sock.sendall(b"hello %d" % index)
        replies = [sock.recv(100) for sock in socks]
        for sock in socks:
            sock.close()

    assert replies == [b"hello 0", b"hello 1", b"hello 2"]


def test_closed_relay_refuses_new_connections(
    netns: NetnsFactory, echo_server: tuple[str, int]
) -> None:
    ns = netns()
    relay = LoopbackRelay(ns.name, echo_server, port=0)
    relay.close()

    with pytest.raises(ConnectionRefusedError):
        _connect_inside(ns.name, relay.port)


def test_relay_sockets_send_small_pieces_at_once(
    netns: NetnsFactory, echo_server: tuple[str, int]
) -> None:
    """Both relayed sockets have Nagle's algorithm off: a piece passed on while the previous one
    is unacknowledged must not wait for the far end's delayed ACK, which no real path adds."""
    ns = netns()
    with (
        LoopbackRelay(ns.name, echo_server, port=0) as relay,
        _connect_inside(ns.name, relay.port) as sock,
    ):
        sock.sendall(b"ping")
        assert sock.recv(100) == b"ping"  # the pair is set up and tracked by now
        relayed = list(relay._open)
        nodelay = [s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in relayed]

    assert len(relayed) == 2
    assert all(nodelay), nodelay


def test_relay_in_the_own_namespace_counts_the_bytes_each_way(
    echo_server: tuple[str, int],
) -> None:
    """``netns=None``: a relay in front of one client in the test's own namespace, counting what
    the client wrote (``sent``) and read (``received``), as the whole-stack bench measures each
    process's response bytes."""
    with LoopbackRelay(None, echo_server, port=0) as relay:
        with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as sock:
            payload = bytes(range(256)) * 1024
            assert _round_trip(sock, payload) == payload
        eventually(lambda: relay.received == len(payload), timeout=5, message="all counted")

    assert relay.sent == len(payload)
    assert relay.netns == "host"

"""Loopback relay into a network namespace (pattern 1 in docs/testing.md).

A short-lived thread enters the namespace, opens a listening TCP socket on ``127.0.0.1:<port>``
there and leaves; the socket stays in the namespace. Each connection accepted on it is piped to
``target`` (host, port) in the test process's own namespace. TLS passes through untouched, so a
process inside the namespace reaches the test apiserver at the same ``127.0.0.1:<port>`` URL.

``netns=None`` listens in the test process's own namespace instead: a relay in front of one
client, so that ``received`` counts the bytes that client read from the server (responses on
the wire, after TLS and any compression) and ``sent`` what it wrote.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from types import TracebackType

from local_ccm.netlink.netns import run_in_netns

log = logging.getLogger(__name__)

CHUNK = 65536
CONNECT_TIMEOUT = 5.0


class LoopbackRelay:
    """``with LoopbackRelay(ns_name, ("127.0.0.1", port)) as relay: ...`` (``relay.port``)."""

    def __init__(
        self,
        netns: str | None,
        target: tuple[str, int],
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        """Listen on ``host:port`` in ``netns`` (``host`` must be an address there; None: the
        test process's own namespace); ``port`` defaults to the target's port, 0 picks a free
        one."""
        self.netns = netns or "host"
        self.target = target
        listen_port = target[1] if port is None else port

        def listen() -> socket.socket:
            return socket.create_server((host, listen_port), backlog=64)

        self._listener = run_in_netns(netns, listen) if netns else listen()
        self.port: int = self._listener.getsockname()[1]
        #: Bytes passed on so far: client -> target (`sent`) and target -> client (`received`).
        self.sent = 0
        self.received = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        self._acceptor = threading.Thread(
            target=self._accept_loop, name=f"relay:{netns}:{self.port}", daemon=True
        )
        self._acceptor.start()

    def __enter__(self) -> LoopbackRelay:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop accepting and cut every open connection; returns when the acceptor has ended."""
        with self._lock:
            self._closed = True
            sockets = [self._listener, *self._open]
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in accept() or recv()
        self._acceptor.join(timeout=10)
        self._listener.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # shut down by close()
            try:
                upstream = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT)
            except OSError as exc:
                log.warning("relay %s: cannot reach %s: %s", self.netns, self.target, exc)
                client.close()
                continue
            upstream.settimeout(None)
            # Every chunk is passed on as it arrives, so a response read in two pieces is written
            # in two: with Nagle's algorithm the second waits for the reader's delayed ACK of the
            # first (about 40 ms on Linux), a stall no real network path adds (measured: it
            # delayed the Go agent's start-up far more often than ours).
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not self._track(client, upstream):
                return
            Pair(client, upstream, self._untrack, self._count).start()

    def _count(self, to_target: bool, size: int) -> None:
        with self._lock:
            if to_target:
                self.sent += size
            else:
                self.received += size

    def _track(self, *socks: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                for sock in socks:
                    sock.close()
                return False
            self._open.update(socks)
            return True

    def _untrack(self, *socks: socket.socket) -> None:
        with self._lock:
            self._open.difference_update(socks)
        for sock in socks:
            sock.close()


class Pair:
    """Two pumps, one per direction; a half-close (EOF) is passed on with shutdown(SHUT_WR).
    ``count(a_to_b, size)`` is told every chunk passed on."""

    def __init__(
        self,
        a: socket.socket,
        b: socket.socket,
        done: Callable[[socket.socket, socket.socket], None],
        count: Callable[[bool, int], None] = lambda _a_to_b, _size: None,
    ) -> None:
        self._a, self._b, self._done, self._count = a, b, done, count
        self._remaining = 2
        self._lock = threading.Lock()

    def start(self) -> None:
        for src, dst in ((self._a, self._b), (self._b, self._a)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        a_to_b = src is self._a
        try:
            while data := src.recv(CHUNK):
                dst.sendall(data)
                self._count(a_to_b, len(data))
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            for sock in (src, dst):  # one side failed: cut both directions
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        with self._lock:
            self._remaining -= 1
            last = self._remaining == 0
        if last:
            self._done(self._a, self._b)

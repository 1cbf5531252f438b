"""A loopback gate in front of the test apiserver: an API server outage a test can end.

``with ApiGate(("127.0.0.1", api_port)) as gate:`` listens on ``127.0.0.1:gate.port`` in the
test's own network namespace. While ``gate.mode`` is ``"refuse"`` every connection is reset as
soon as it is accepted (what a client sees of an apiserver that is not up yet behind a load
balancer); ``"hang"`` accepts and reads but never answers (a wedged apiserver, as in
tests/support/hung.py); ``"forward"`` pipes each new connection to the target. TLS passes through
untouched, so a kubeconfig only needs its server's port changed (see `gated_kubeconfig`).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from pathlib import Path
from types import TracebackType
from typing import Literal

from tests.support.relay import CONNECT_TIMEOUT, Pair

Mode = Literal["refuse", "hang", "forward"]


class ApiGate:
    def __init__(self, target: tuple[str, int], *, mode: Mode = "refuse") -> None:
        self.target = target
        self._mode: Mode = mode
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._held: set[socket.socket] = set()
        self._connections = 0
        self._acceptor = threading.Thread(target=self._accept_loop, name="api-gate", daemon=True)

    @property
    def connections(self) -> int:
        """Connections accepted so far, whatever the mode."""
        with self._lock:
            return self._connections

    @property
    def mode(self) -> Mode:
        with self._lock:
            return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        """New connections follow `mode`; connections held by "hang" are reset on any change."""
        with self._lock:
            self._mode = mode
            held, self._held = self._held, set()
        for sock in held:
            _reset(sock)

    def cut(self) -> None:
        """Reset every forwarded connection: a client's next request opens a new one, which
        meets the current mode (with "hang": an API server that stops answering mid-run)."""
        with self._lock:
            forwarded, self._open = list(self._open), set()
        for sock in forwarded:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> ApiGate:
        self._acceptor.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        with self._lock:
            held, self._held = list(self._held), set()
            sockets = [*self._open, *held]
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for sock in held:  # nobody pumps them: the forwarded ones close when their pumps end
            sock.close()
        self._acceptor.join(timeout=10)
        self._listener.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._connections += 1
                mode = self._mode
                if mode == "hang":
                    self._held.add(client)
            if mode == "refuse":
                _reset(client)
            elif mode == "forward":
                self._forward(client)

    def _forward(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT)
        except OSError:
            _reset(client)
            return
        upstream.settimeout(None)
        with self._lock:
            self._open.update((client, upstream))
        Pair(client, upstream, self._untrack).start()

    def _untrack(self, *socks: socket.socket) -> None:
        with self._lock:
            self._open.difference_update(socks)
        for sock in socks:
            sock.close()


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a refused or dropped connection looks to a client."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def gated_kubeconfig(kubeconfig: Path, api_url: str, gate: ApiGate, directory: Path) -> Path:
    """A copy of `kubeconfig` whose server is the gate (same host, so TLS still verifies)."""
    text = kubeconfig.read_text()
    assert api_url in text, f"{kubeconfig} does not point at {api_url}"
    path = directory / f"gated-{gate.port}.kubeconfig"
    path.write_text(text.replace(api_url, f"https://127.0.0.1:{gate.port}"))
    path.chmod(0o600)
    return path

"""A "hung API server": a loopback listener that accepts connections (and, in TLS mode, completes
the handshake unless told not to) and reads what it is sent, but never answers. A kubeconfig
pointing at it makes every request of a binary block until its own timeout, which is how an
overloaded or wedged kube-apiserver looks from a client.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from tests.support import pki


class HungServer:
    """``with HungServer(directory, tls=True) as hung:`` then ``hung.kubeconfig``.

    ``requests`` counts connections on which at least one byte of a request arrived (after the
    handshake in TLS mode): a binary has reached the hang once it is positive. With
    ``handshake=False`` (TLS mode) the client's hello is read and never answered, so the client
    hangs inside its TLS handshake; the first hello counts as the request.
    """

    def __init__(self, directory: Path, *, tls: bool = False, handshake: bool = True) -> None:
        self.tls = tls
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._requests = 0
        self._closed = threading.Event()
        scheme = "https" if tls else "http"
        now = datetime.now(UTC)
        ca = pki.new_ca("hung-apiserver-ca", now)
        self._context: ssl.SSLContext | None = None
        if tls and handshake:
            self._context = _server_context(pki.issue_serving(ca, now))
        admin = pki.issue_client(ca, pki.ADMIN_USER, pki.ADMIN_GROUPS, now)
        text = pki.render_kubeconfig(
            f"{scheme}://127.0.0.1:{self.port}", ca.cert_pem, user=pki.ADMIN_USER, client=admin
        )
        self.kubeconfig = pki.write_kubeconfig(directory / "hung-kubeconfig", text)
        self._thread = threading.Thread(target=self._accept, name="hung-apiserver", daemon=True)

    @property
    def requests(self) -> int:
        with self._lock:
            return self._requests

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        """Handshake (TLS mode), read the request, never answer; until closed."""
        with self._lock:
            self._conns.append(conn)
        try:
            if self._context is not None:
                conn = self._context.wrap_socket(conn, server_side=True)
                with self._lock:
                    self._conns.append(conn)
            counted = False
            while data := conn.recv(65536):
                if not counted:
                    counted = True
                    with self._lock:
                        self._requests += 1
                del data
        except (OSError, ssl.SSLError):
            return

    def __enter__(self) -> HungServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept(); close() alone does not
        self._listener.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.close()
        self._thread.join(5)


def _server_context(serving: pki.Issued) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory(prefix="hung-tls-") as tmp:
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert.write_bytes(serving.cert_pem)
        key.write_bytes(serving.key_pem)
        context.load_cert_chain(cert, key)
    return context

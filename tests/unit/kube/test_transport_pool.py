"""The keep-alive pool of HttpTransport: no I/O, connections are never opened here."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from local_ccm.kube.config import ClusterConfig
from local_ccm.kube.errors import ApiError
from local_ccm.kube.http1 import Connection
from local_ccm.kube.request import Request
from local_ccm.kube.transport import HttpTransport
from tests.support.waiting import eventually


class Recording(Connection):
    closed_calls = 0

    def close(self) -> None:
        self.closed_calls += 1
        super().close()


def test_a_connection_released_after_close_is_closed_not_pooled() -> None:
    """A request still running at shutdown must not leak its socket into a dead pool."""
    transport = HttpTransport(ClusterConfig(server="http://127.0.0.1:9"), user_agent="t")
    conn = Recording("127.0.0.1", 9, timeout=5)
    transport.close()
    transport._release(conn)
    assert transport._idle == []
    assert conn.closed_calls == 1


def test_a_connection_released_while_open_is_kept_for_reuse() -> None:
    transport = HttpTransport(ClusterConfig(server="http://127.0.0.1:9"), user_agent="t")
    conn = Recording("127.0.0.1", 9, timeout=5)
    transport._release(conn)
    assert transport._idle == [conn]
    assert conn.closed_calls == 0
    transport.close()
    assert conn.closed_calls == 1


class _DropAfterAnswer(http.server.BaseHTTPRequestHandler):
    """Answers as if keeping the connection alive, then closes it: a restarted server."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b'{"kind":"Status"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        del format, args


def test_a_connection_closed_by_the_server_is_replaced_and_pooling_goes_on() -> None:
    """Loopback only. The stale keep-alive is retried on a fresh connection, and the pool
    keeps working afterwards (dropping stale connections must not close the transport)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DropAfterAnswer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        transport = HttpTransport(ClusterConfig(server=url), user_agent="t")
        for _ in range(3):
            assert transport.send(Request("GET", "/version"), timeout=5).status == 200
        assert len(transport._idle) == 1
        transport.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_close_ends_a_request_waiting_for_a_server_that_never_answers(scheme: str) -> None:
    """Loopback only. A stopping process closes its client; a start-up request blocked on a
    hung API server must end then, not after its own timeout: over HTTPS the listener never
    answers the client's hello, so the request is still inside its TLS handshake."""
    listener = socket.create_server(("127.0.0.1", 0))  # accepted by the kernel, never answered
    try:
        url = f"{scheme}://127.0.0.1:{listener.getsockname()[1]}"
        config = ClusterConfig(server=url, insecure_skip_tls_verify=True)
        transport = HttpTransport(config, user_agent="t")
        failures: list[BaseException] = []

        def send() -> None:
            try:
                transport.send(Request("GET", "/version"), timeout=60)
            except ApiError as exc:
                failures.append(exc)

        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        eventually(lambda: transport._busy, timeout=10, message="the request is on its way")
        transport.close()
        thread.join(3)
        assert not thread.is_alive()
        assert [type(f) for f in failures] == [ApiError], failures  # ClientClosed: no retry
        assert "closed" in str(failures[0])
        with pytest.raises(ApiError, match="closed"):
            transport.send(Request("GET", "/version"), timeout=60)
    finally:
        listener.close()


def test_an_interrupted_connection_never_connects() -> None:
    """`interrupt()` before the socket exists (a client closed while a request was about to
    connect) still ends the connect at once: nothing is dialled."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    try:
        conn = Connection("127.0.0.1", listener.getsockname()[1], timeout=60)
        conn.interrupt()
        with pytest.raises(OSError, match="interrupted"):
            conn.connect()
        assert conn.sock is None
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()

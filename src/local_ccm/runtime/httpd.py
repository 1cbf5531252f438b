"""A minimal HTTP/1.1 server for `/metrics`, `/healthz` and `/readyz`: one GET per connection.

What the stdlib `http.server` did for these three read-only paths, without its imports
(socketserver, the email header parser, html, mimetypes: +1.2 MiB RSS and ~15 ms at start):

- one acceptor thread per listening socket, blocking in `select` on the listener and a wake
  socket, so an idle server never wakes up and `close()` stops it at once;
- each connection in a short-lived daemon thread (TLS handshake included, never in the
  acceptor), which must receive the whole request head within `head_timeout`: a slow or
  silent client costs one thread for that long, never the server;
- a request head of at most `MAX_HEAD` bytes (else 431), GET only (else 501, as `http.server`
  answered a method its handler did not define), every answer `Connection: close`
  (RFC 9112 section 9.6), which Prometheus and kubelet probes expect of such endpoints.

`parse_head` and `encode_response` are pure; `Server` is the socket loop around them.
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from local_ccm.logs import V4

log = logging.getLogger(__name__)

MAX_HEAD = 16 * 1024
HEAD_TIMEOUT = 10.0  # seconds a client has to send its request head (and to read the answer)
TLS_HANDSHAKE_TIMEOUT = 10.0
ACCEPT_RETRY = 0.1  # pause after a failed accept (EMFILE, ...), so it does not spin
BACKLOG = 64
DRAIN, DRAIN_TIMEOUT = 64 * 1024, 1.0  # after refusing a request (see `_drain`)
TEXT = "text/plain; charset=utf-8"

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


class Request(NamedTuple):  # NamedTuple, not a dataclass: a third of the import time
    """A parsed request head; header names are lower-case, the first of repeated ones wins."""

    method: str
    target: str
    version: str
    headers: Mapping[str, str]

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class Response(NamedTuple):
    status: int
    content_type: str
    body: bytes


Handler = Callable[[Request], Response]


class RequestError(Exception):
    """A request head this server refuses; `status` and the message are the answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def head_end(data: bytes) -> int:
    """The length of the request head at the start of `data` (blank line included), or -1."""
    ends = [(data.find(sep), len(sep)) for sep in (b"\r\n\r\n", b"\n\n")]
    found = [at + size for at, size in ends if at >= 0]
    return min(found) if found else -1


def parse_head(head: bytes) -> Request:
    """The request in `head` (request line and header lines); raises RequestError."""
    # Lines end in CRLF or LF (RFC 9112 section 2.2); not str.splitlines, which splits at NEL too.
    lines = [line.removesuffix("\r") for line in head.decode("iso-8859-1").split("\n")]
    words = lines[0].split()
    if len(words) != 3:
        raise RequestError(400, f"bad request line {lines[0]!r}")
    method, target, version = words
    _check_version(version)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            break
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise RequestError(400, f"bad header line {line!r}")
        headers.setdefault(name.lower(), value.strip())
    return Request(method, target, version, headers)


def _check_version(version: str) -> None:
    """Accept HTTP/1.x; 505 for a later major version, 400 for anything else."""
    major, _, minor = version.removeprefix("HTTP/").partition(".")
    if not version.startswith("HTTP/") or not (major.isdecimal() and minor.isdecimal()):
        raise RequestError(400, f"bad request version {version!r}")
    if int(major) >= 2:
        raise RequestError(505, f"unsupported version {version}")
    if int(major) < 1:
        raise RequestError(400, f"bad request version {version!r}")


def encode_response(response: Response) -> bytes:
    """Status line, headers and body, closing the connection after it."""
    reason = _REASONS.get(response.status, "")
    head = (
        f"HTTP/1.1 {response.status} {reason}\r\n"
        f"Content-Type: {response.content_type}\r\n"
        f"Content-Length: {len(response.body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("iso-8859-1") + response.body


def read_head(conn: socket.socket, deadline: float) -> bytes:
    """The request head from `conn`, received before `deadline` (monotonic); b"" when the
    client closed first. Raises RequestError(431) past MAX_HEAD, TimeoutError past `deadline`."""
    data = b""
    while (end := head_end(data)) < 0:
        if len(data) > MAX_HEAD:
            raise RequestError(431, f"request head over {MAX_HEAD} bytes")
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request head not received in time")
        conn.settimeout(left)
        chunk = conn.recv(4096)
        if not chunk:
            return b""
        data += chunk
    if end > MAX_HEAD:
        raise RequestError(431, f"request head over {MAX_HEAD} bytes")
    return data[:end]


class Server:
    """Serves `handler` on the listening socket `listener` (HTTPS when `tls` is given) from
    one acceptor thread until `close()`."""

    def __init__(
        self,
        listener: socket.socket,
        handler: Handler,
        tls: ssl.SSLContext | None = None,
        head_timeout: float = HEAD_TIMEOUT,
    ) -> None:
        self._listener, self._handler = listener, handler
        self._tls, self._head_timeout = tls, head_timeout
        listener.setblocking(False)  # a connection reset between select and accept: no block
        self._wake, self._waker = socket.socketpair()
        self.port = int(listener.getsockname()[1])
        self._thread = threading.Thread(target=self._accept, name=f"http-{self.port}", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        """Block until a connection or `close()`; an idle server costs no CPU at all."""
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake, selectors.EVENT_READ)
            while True:
                ready = [key.fileobj for key, _ in selector.select()]
                if self._wake in ready:
                    return
                try:
                    conn, peer = self._listener.accept()
                except BlockingIOError:
                    continue
                except OSError as exc:  # out of descriptors, ...: the next try may work
                    log.warning("http accept on port %d failed: %s", self.port, exc)
                    time.sleep(ACCEPT_RETRY)
                    continue
                name, args = f"http-{self.port}-conn", (conn, peer[0])
                threading.Thread(target=self._serve, args=args, name=name, daemon=True).start()

    def _serve(self, conn: socket.socket, client: str) -> None:
        """Answer the one request of `conn`, then close it."""
        sock = conn
        try:
            if self._tls is not None:
                sock = self._tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
                if not _handshake(sock, client):
                    return
            self._exchange(sock, client, time.monotonic() + self._head_timeout)
        except OSError as exc:  # the client hung up, timed out, ...
            log.log(V4, "http %s connection failed: %s", client, exc)
        finally:
            sock.close()

    def _exchange(self, sock: socket.socket, client: str, deadline: float) -> None:
        line, refused = "-", False
        try:
            head = read_head(sock, deadline)
            if not head:
                return
            line = head.split(b"\n", 1)[0].decode("iso-8859-1").strip()
            response = self._answer(parse_head(head))
        except RequestError as exc:
            response, refused = Response(exc.status, TEXT, f"{exc}\n".encode()), True
        except TimeoutError:
            log.log(V4, "http %s sent no request in %.0fs", client, self._head_timeout)
            return
        sock.settimeout(self._head_timeout)
        sock.sendall(encode_response(response))
        log.log(V4, 'http %s "%s" %d %d', client, line, response.status, len(response.body))
        sock.shutdown(socket.SHUT_WR)
        if refused:
            _drain(sock)

    def _answer(self, request: Request) -> Response:
        if request.method != "GET":
            return Response(501, TEXT, f"unsupported method {request.method}\n".encode())
        try:
            return self._handler(request)
        except Exception:  # a broken handler answers 500; the server goes on
            log.error("http %s %s failed", request.method, request.target, exc_info=True)
            return Response(500, TEXT, b"internal server error\n")

    def close(self) -> None:
        """Stop accepting (at once: the acceptor is woken) and release the port; requests
        under way finish on their own threads."""
        self._waker.send(b"x")
        self._thread.join()
        self._listener.close()
        self._wake.close()
        self._waker.close()


def _handshake(sock: ssl.SSLSocket, client: str) -> bool:
    """True when the TLS handshake succeeded; a failure is logged, as the client's problem."""
    sock.settimeout(TLS_HANDSHAKE_TIMEOUT)
    try:
        sock.do_handshake()
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        log.log(V4, "https %s handshake failed: %s", client, exc)
        return False
    return True


def _drain(sock: socket.socket) -> None:
    """Read what a refused client is still sending (up to DRAIN bytes, for DRAIN_TIMEOUT):
    closing with unread input resets the connection, and the client could lose the answer."""
    sock.settimeout(DRAIN_TIMEOUT)
    left = DRAIN
    try:
        while left > 0 and (chunk := sock.recv(min(left, 4096))):
            left -= len(chunk)
    except OSError:  # timed out or reset: the answer has had its chance
        return

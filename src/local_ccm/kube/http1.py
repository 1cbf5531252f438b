"""One HTTP/1.1 client connection: what talking to the API server (and instance metadata) needs.

http.client parses every answer's headers with the email package: importing it costs every
process a few milliseconds at start, and its parsing was about half of the CPU a request takes
in its worker thread (measured on node-ipam-controller at 5 QPS). The API server speaks plain
HTTP/1.1: a status line, header lines, then a body framed by Content-Length, by chunked
transfer coding, or by the end of the connection. Requests are written in one ``sendall``.

Blocking, for one thread at a time; another thread may only call ``interrupt()``, which wakes a
blocked connect, TLS handshake or read. Malformed answers raise :class:`ProtocolError` and a
server that closed the connection before answering :class:`RemoteDisconnectedError`; both are
``OSError`` like every socket failure, so a caller handles one exception type.
"""

from __future__ import annotations

import contextlib
import io
import socket
import ssl
from collections.abc import Mapping

MAX_LINE = 65536  # status and header lines; body lines are not limited
MAX_HEADERS = 100
_NO_BODY = frozenset({204, 304})
_SENDS_BODY = frozenset({"POST", "PUT", "PATCH"})
_EOF, _LENGTH, _CHUNKED = 0, 1, 2


def wire_host(host: str) -> str | bytes:
    """`host` as `socket.getaddrinfo` and `ssl` take it: an ASCII name (every IP address and
    kubeconfig server in practice) as bytes, used as it is; given a str, both run the "idna"
    codec on it, whose first use imports `stringprep` and `unicodedata`: measured 3.3 ms of CPU
    and 0.5 MiB of RSS in every process that talks to the API server. TLS verifies the
    certificate for the same name. Other names go through the codec."""
    return host.encode("ascii") if host.isascii() else host


class ProtocolError(OSError):
    """The peer did not answer in HTTP/1.x; the connection cannot be used again."""


class BodyTooLongError(ProtocolError):
    """The body is longer than the reader's limit; the connection cannot be used again."""


class RemoteDisconnectedError(ConnectionResetError):
    """The connection ended before a status line: a keep-alive connection the server closed."""


class Connection:
    """A connection to `host`:`port`, over TLS when `context` is given (verifying
    `server_name` when it differs from the host dialled). Connects on the first request."""

    def __init__(
        self,
        host: str,
        port: int | None = None,
        *,
        timeout: float,
        context: ssl.SSLContext | None = None,
        server_name: str | None = None,
    ) -> None:
        default = 443 if context is not None else 80
        self.host, self.port, self.timeout = host, port or default, timeout
        self._context, self._server_name = context, server_name
        name = f"[{host}]" if ":" in host else host
        self._host_header = name if self.port == default else f"{name}:{self.port}"
        self.sock: socket.socket | None = None
        self._reader: _Reader | None = None
        self._interrupted = False

    def connect(self) -> None:
        """Dial and, over TLS, handshake. The socket is `sock` from before it connects, so an
        `interrupt()` from another thread ends either step at once instead of after `timeout`
        (a stopping process must not wait for an API server that accepts and never answers)."""
        sock = self._dial()
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                sock = self._context.wrap_socket(
                    sock, server_hostname=wire_host(self._server_name or self.host),
                    do_handshake_on_connect=False,
                )  # fmt: skip
                self._publish(sock)
                sock.do_handshake()
        except BaseException:
            self.sock = None
            sock.close()
            raise
        self._reader = _Reader(sock.makefile("rb"))

    def _dial(self) -> socket.socket:
        """`socket.create_connection`, with each socket published before it connects."""
        errors: list[OSError] = []
        for family, kind, proto, _, address in socket.getaddrinfo(
            wire_host(self.host), self.port, 0, socket.SOCK_STREAM
        ):
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(self.timeout)
                self._publish(sock)
                sock.connect(address)
                return sock
            except OSError as exc:
                self.sock = None
                sock.close()
                if self._interrupted:
                    raise
                errors.append(exc)
        raise errors[0] if errors else OSError(f"no address for {self.host}")

    def _publish(self, sock: socket.socket) -> None:
        self.sock = sock
        if self._interrupted:  # interrupt() came while there was no socket to shut down
            raise ConnectionAbortedError("connection interrupted")

    def interrupt(self) -> None:
        """From any thread: wake this connection's blocked connect, handshake or read, which
        then fails with an ``OSError``; the connection is never used again."""
        self._interrupted = True
        sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                # The plain socket's shutdown: ``SSLSocket.shutdown`` would also drop the TLS
                # state that a handshake in another thread is about to use.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def request(
        self, method: str, target: str, body: bytes | None, headers: Mapping[str, str]
    ) -> None:
        """Write one request (connecting first if needed)."""
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        if body is not None or method in _SENDS_BODY:
            lines.append(f"Content-Length: {len(body or b'')}")
        if any("\n" in line or "\r" in line for line in lines):
            raise ValueError("a request line or header contains a line break")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        if self.sock is None:
            self.connect()
        assert self.sock is not None
        self.sock.sendall(data)

    def getresponse(self) -> Response:
        """Read the status line and headers of the answer to the last request."""
        if self._reader is None:
            raise ProtocolError("no request was sent on this connection")
        return Response(self._reader)

    def close(self) -> None:
        reader, sock = self._reader, self.sock
        self._reader, self.sock = None, None
        if reader is not None:
            reader.file.close()
        if sock is not None:
            sock.close()


class _Reader:
    """The buffered read side of a socket."""

    def __init__(self, file: io.BufferedReader) -> None:
        self.file, self.readline, self.read = file, file.readline, file.read

    def line(self) -> bytes:
        line: bytes = self.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise ProtocolError("header line too long")
        return line


class Response:
    """An answer: ``status``, ``reason``, ``headers`` (lower-case names), ``will_close``;
    its body by ``read()`` (all of it) or ``readline()`` (a stream, ``b""`` at its end)."""

    def __init__(self, reader: _Reader) -> None:
        self._reader = reader
        version, self.status, self.reason = _status_line(reader.line())
        while 100 <= self.status < 200:  # interim answers carry headers and no body
            _headers(reader)
            version, self.status, self.reason = _status_line(reader.line())
        self.headers = _headers(reader)
        tokens = self.headers.get("connection", "").lower()
        old = version == "HTTP/1.0" and "keep-alive" not in tokens
        self.will_close = "close" in tokens or old
        self._left = 0  # bytes of the body (_LENGTH) or of the current chunk (_CHUNKED)
        self._done = False
        if self.status in _NO_BODY:
            self._framing, self._done = _LENGTH, True
        elif "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._framing = _CHUNKED
        elif "content-length" in self.headers:
            self._framing, self._left = _LENGTH, _length(self.headers["content-length"])
            self._done = self._left == 0
        else:
            self._framing, self.will_close = _EOF, True

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)

    def read(self, limit: int | None = None) -> bytes:
        """The rest of the body; BodyTooLongError past `limit` bytes (None: no limit)."""
        if self._done:
            return b""
        if self._framing == _LENGTH:
            _check_limit(self._left, limit)
            data: bytes = self._reader.read(self._left)
            if len(data) < self._left:
                raise ProtocolError(f"body ended after {len(data)} of {self._left} bytes")
            self._left, self._done = 0, True
            return data
        if self._framing == _EOF:
            self._done = True
            rest: bytes = self._reader.read(-1 if limit is None else limit + 1)
            _check_limit(len(rest), limit)
            return rest
        parts, size = [], 0
        while self._left or self._next_chunk():
            size += self._left
            _check_limit(size, limit)  # before the chunk's data is read
            parts.append(self._chunk_rest())
        return b"".join(parts)

    def readline(self) -> bytes:
        """The next line of the body, with its b"\\n"; b"" once the body has ended."""
        if self._done:
            return b""
        if self._framing == _EOF:
            line: bytes = self._reader.readline()
            self._done = not line
            return line
        if self._framing == _LENGTH:
            line = self._reader.readline(self._left)
            if not line:
                raise ProtocolError(f"body ended {self._left} bytes early")
            self._left -= len(line)
            self._done = self._left == 0
            return line
        out = b""
        while not out.endswith(b"\n"):
            if self._left == 0 and not self._next_chunk():
                return out
            piece: bytes = self._reader.readline(self._left)
            if not piece:
                raise ProtocolError("connection ended inside a chunk")
            self._left -= len(piece)
            if self._left == 0:
                self._chunk_end()
            out += piece
        return out

    def _chunk_rest(self) -> bytes:
        """The rest of the current chunk's data, and the CRLF after it."""
        data: bytes = self._reader.read(self._left)
        if len(data) < self._left:
            raise ProtocolError("connection ended inside a chunk")
        self._left = 0
        self._chunk_end()
        return data

    def _next_chunk(self) -> bool:
        """Read a chunk header; False (and the trailers consumed) at the last chunk."""
        line = self._reader.line()
        if not line:
            raise ProtocolError("connection ended before the last chunk")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size line {line[:40]!r}") from None
        if size < 0:
            raise ProtocolError(f"bad chunk size line {line[:40]!r}")
        if size == 0:
            _headers(self._reader)  # trailers, up to the empty line
            self._done = True
            return False
        self._left = size
        return True

    def _chunk_end(self) -> None:
        if self._reader.line() not in (b"\r\n", b"\n"):
            raise ProtocolError("chunk not followed by CRLF")


def _status_line(line: bytes) -> tuple[str, int, str]:
    if not line:
        raise RemoteDisconnectedError("the server closed the connection without an answer")
    parts = line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"not an HTTP/1.x status line: {line[:60]!r}")
    return parts[0], int(parts[1]), parts[2].strip() if len(parts) > 2 else ""


def _headers(reader: _Reader) -> dict[str, str]:
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = reader.line()
        if line in (b"\r\n", b"\n", b""):
            return headers
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise ProtocolError(f"not a header line: {line[:60]!r}")
        key, text = name.strip().lower(), value.strip()
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    raise ProtocolError(f"more than {MAX_HEADERS} header lines")


def _length(text: str) -> int:
    if not text.strip().isdigit():
        raise ProtocolError(f"bad Content-Length {text[:40]!r}")
    return int(text)


def _check_limit(size: int, limit: int | None) -> None:
    if limit is not None and size > limit:
        raise BodyTooLongError(f"body longer than {limit} bytes")

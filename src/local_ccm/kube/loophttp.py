"""One HTTP/1.1 connection to the API server on the running event loop: a non-blocking (TLS)
socket the loop's selector waits on, and the framing of `kube.http1` read from what arrived
(status line, header lines, then Content-Length, chunked, or until the connection ends).
`kube.looptransport` keeps the pool and sends the requests.

The loop reads whatever the socket holds when it is readable (`Connection`); a coroutine reading
an answer waits only for more bytes than it has, so an answer that came in one piece costs one
wake-up. Malformed answers raise `http1.ProtocolError` and a connection that ended
`RemoteDisconnectedError`, both `OSError` like every socket failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import ssl
from collections.abc import Callable
from typing import Any

from local_ccm.kube.http1 import (
    MAX_HEADERS,
    MAX_LINE,
    ProtocolError,
    RemoteDisconnectedError,
    wire_host,
)

READ_SIZE = 262144  # what one recv may take; a TLS record is at most 16 KiB of it
_NO_BODY = frozenset({204, 304})


class Connection:
    """One connection, its socket non-blocking: the loop appends what arrives to `buf` (also
    while idle, so a keep-alive connection the server closed is known before it is reused)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self.loop, self.sock, self.fd = loop, sock, sock.fileno()
        self.buf = bytearray()
        self.eof = False
        self.error: OSError | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.last_read = loop.time()  # when bytes (or the end) last came
        loop.add_reader(self.fd, self._readable)

    @property
    def usable(self) -> bool:
        return not (self.eof or self.error or self.buf)

    def _readable(self) -> None:
        try:
            while data := self.sock.recv(READ_SIZE):
                self.buf += data
            self.eof = True
        except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
            pass
        except ssl.SSLWantWriteError:  # TLS must write first (a key update): then read again
            self.loop.remove_reader(self.fd)
            self.loop.add_writer(self.fd, self._resume)
        except OSError as exc:
            self.error = exc
        if self.eof or self.error:
            self.loop.remove_reader(self.fd)
        self.last_read = self.loop.time()
        self._wake()

    def _resume(self) -> None:
        self.loop.remove_writer(self.fd)
        self.loop.add_reader(self.fd, self._readable)
        self._readable()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def more(self) -> None:
        """Until the loop appended bytes to `buf`; raises once the connection ended."""
        if self.error is not None:
            raise self.error
        if self.eof:
            raise RemoteDisconnectedError("the server closed the connection")
        self.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[self.sock.send(view) :]
            except (ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
                await self._writable()
            except ssl.SSLWantReadError:  # TLS must read first
                await self.more()

    async def _writable(self) -> None:
        if self.error is not None:
            raise self.error
        self.waiter = self.loop.create_future()
        self.loop.add_writer(self.fd, _waker(self.waiter))
        try:
            await self.waiter
        finally:
            self.waiter = None
            if self.fd >= 0:
                self.loop.remove_writer(self.fd)

    def expire(self, why: str = "timed out") -> None:
        """A deadline passed: closed, and a coroutine waiting on it fails with TimeoutError."""
        if self.error is None:
            self.error = TimeoutError(why)
        self.close()

    def close(self) -> None:
        """Idempotent; a coroutine waiting for bytes fails with `ConnectionAbortedError`."""
        if self.error is None:
            self.error = ConnectionAbortedError("connection closed")
        if self.fd >= 0:
            with contextlib.suppress(RuntimeError):  # the loop may be closed already
                self.loop.remove_reader(self.fd)
                self.loop.remove_writer(self.fd)
            self.fd = -1
            self.sock.close()
        self._wake()


# ---------------------------------------------------------------- reading an answer


async def read_head(conn: Connection) -> tuple[int, dict[str, str]]:
    """The status and the headers (lower-case names) of the next answer, 1xx skipped."""
    while True:
        end = conn.buf.find(b"\r\n\r\n")
        while end < 0:
            if len(conn.buf) > MAX_LINE * MAX_HEADERS:
                raise ProtocolError("answer head too long")
            await conn.more()
            end = conn.buf.find(b"\r\n\r\n")
        lines = bytes(conn.buf[:end]).decode("latin-1").split("\r\n")
        del conn.buf[: end + 4]
        status = _status(lines[0])
        if not 100 <= status < 200:
            return status, _headers(lines[1:])


def _status(line: str) -> int:
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"not an HTTP/1.x status line: {line[:60]!r}")
    return int(parts[1])


def _headers(lines: list[str]) -> dict[str, str]:
    if len(lines) > MAX_HEADERS:
        raise ProtocolError(f"more than {MAX_HEADERS} header lines")
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError(f"not a header line: {line[:60]!r}")
        key, text = name.strip().lower(), value.strip()
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def will_close(status: int, headers: dict[str, str]) -> bool:
    """No keep-alive after this answer (HTTP/1.0 answers are not expected from an API server)."""
    unframed = status not in _NO_BODY and not _framed(headers)
    return unframed or "close" in headers.get("connection", "").lower()


def _framed(headers: dict[str, str]) -> bool:
    return "content-length" in headers or _chunked(headers)


def _chunked(headers: dict[str, str]) -> bool:
    return "chunked" in headers.get("transfer-encoding", "").lower()


async def read_body(conn: Connection, status: int, headers: dict[str, str]) -> bytes:
    """The whole body of the answer whose head was read."""
    if status in _NO_BODY:
        return b""
    if _chunked(headers):
        chunks = Chunks(conn)
        parts = []
        while (part := await chunks.next()) is not None:
            parts.append(part)
        return b"".join(parts)
    if "content-length" not in headers:  # delimited by the connection's end
        while not conn.eof:
            await conn.more()
        return _take(conn, len(conn.buf))
    size = _length(headers["content-length"])
    while len(conn.buf) < size:
        await conn.more()
    return _take(conn, size)


def _take(conn: Connection, size: int) -> bytes:
    data = bytes(conn.buf[:size])
    del conn.buf[:size]
    return data


def _length(text: str) -> int:
    if not text.strip().isdigit():
        raise ProtocolError(f"bad Content-Length {text[:40]!r}")
    return int(text)


class Chunks:
    """A chunked body's data as it arrives: `next()` gives every byte there is, or waits."""

    def __init__(self, conn: Connection) -> None:
        self.conn, self.left, self.done = conn, 0, False
        self.crlf = False  # a chunk's data was read, its CRLF not yet
        self.trailer = False  # the last chunk was read, the trailer section not yet

    async def next(self) -> bytes | None:
        """The data that has arrived since the last call (waiting for some); None at the end."""
        while not self.done:
            data = self._decode()
            if data:
                return data
            if not self.done:
                await self.conn.more()
        return None

    def _decode(self) -> bytes:
        buf, pos, parts = self.conn.buf, 0, []
        while not self.done:
            if self.left:
                piece = buf[pos : pos + self.left]
                parts.append(bytes(piece))
                pos, self.left = pos + len(piece), self.left - len(piece)
                if self.left:
                    break
                self.crlf = True
            if self.crlf:
                if len(buf) - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise ProtocolError("chunk not followed by CRLF")
                pos, self.crlf = pos + 2, False
            pos, ended = self._trailer(buf, pos) if self.trailer else self._size_line(buf, pos)
            if not ended:
                break
        del buf[:pos]
        return b"".join(parts)

    def _trailer(self, buf: bytearray, pos: int) -> tuple[int, bool]:
        """Trailer lines (the API server sends none) up to the empty line that ends the body."""
        if buf[pos : pos + 2] == b"\r\n":
            end = pos + 2
        elif (found := buf.find(b"\r\n\r\n", pos)) >= 0:
            end = found + 4
        elif len(buf) - pos > MAX_LINE * MAX_HEADERS:
            raise ProtocolError("trailer too long")
        else:
            return pos, False
        self.done = True
        return end, True

    def _size_line(self, buf: bytearray, pos: int) -> tuple[int, bool]:
        end = buf.find(b"\r\n", pos)
        if end < 0:
            if len(buf) - pos > MAX_LINE:
                raise ProtocolError("chunk size line too long")
            return pos, False
        text = bytes(buf[pos:end]).split(b";", 1)[0].strip()
        try:
            size = int(text, 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size line {text[:40]!r}") from None
        if size < 0:
            raise ProtocolError(f"bad chunk size line {text[:40]!r}")
        if size == 0:  # the last chunk: the trailer section follows
            self.trailer = True
            return end + 2, True
        self.left = size
        return end + 2, True


class Opening:
    """A connection being dialled and, over TLS, handshaken; `abort()` (the transport's
    `close()`) ends it at once: the socket closed, the step waiting on it woken."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.sock: socket.socket | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.aborted = False

    async def dial(self, host: str, port: int) -> socket.socket:
        errors: list[OSError] = []
        infos = await self.loop.getaddrinfo(wire_host(host), port, type=socket.SOCK_STREAM)
        for family, kind, proto, _, address in infos:
            try:
                return await self._connect(socket.socket(family, kind, proto), address)
            except OSError as exc:
                if self.aborted:
                    raise
                errors.append(exc)
        raise errors[0] if errors else OSError(f"no address for {host}")

    async def _connect(self, sock: socket.socket, address: Any) -> socket.socket:
        self.sock = sock
        try:
            sock.setblocking(False)
            code = sock.connect_ex(address)
            if code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EINTR):
                await self.ready(writable=True)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise OSError(code, os.strerror(code))
        except BaseException:
            sock.close()
            raise
        return sock

    async def handshake(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock
        while True:
            try:
                sock.do_handshake()
                return
            except ssl.SSLWantReadError:
                await self.ready(writable=False)
            except ssl.SSLWantWriteError:
                await self.ready(writable=True)

    async def ready(self, *, writable: bool) -> None:
        """Until the socket is writable (or readable); raises once aborted."""
        if self.aborted or self.sock is None:
            raise ConnectionAbortedError("connection closed")
        fd, waiter = self.sock.fileno(), self.loop.create_future()
        self.waiter = waiter
        add, remove = _watchers(self.loop, writable)
        add(fd, _waker(waiter))
        try:
            await waiter
        finally:
            self.waiter = None
            if not self.aborted:
                remove(fd)

    def abort(self) -> None:
        self.aborted = True
        if self.sock is not None and self.sock.fileno() >= 0:
            fd = self.sock.fileno()
            with contextlib.suppress(RuntimeError):  # the loop may be closed already
                self.loop.remove_reader(fd)
                self.loop.remove_writer(fd)
            self.sock.close()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionAbortedError("connection closed"))


def _watchers(
    loop: asyncio.AbstractEventLoop, writable: bool
) -> tuple[Callable[..., object], Callable[[int], object]]:
    return (loop.add_writer, loop.remove_writer) if writable else (loop.add_reader,
                                                                   loop.remove_reader)  # fmt: skip


def _waker(waiter: asyncio.Future[None]) -> Callable[[], None]:
    def wake() -> None:
        if not waiter.done():
            waiter.set_result(None)

    return wake


class LoopStream:
    """A streaming answer: `readline()` until the server ends it (then b"") or `close()`."""

    def __init__(self, conn: Connection, headers: dict[str, str], silence: float) -> None:
        self._conn, self._silence = conn, silence
        self._chunks = Chunks(conn) if _chunked(headers) else None
        self._data = bytearray()
        self._ended = False
        # One timer per silence, not one per read: it looks when the last byte came.
        self._timer = conn.loop.call_later(silence, self._check)

    def _check(self) -> None:
        quiet = self._conn.loop.time() - self._conn.last_read
        if quiet >= self._silence:
            self._conn.expire(f"no byte for {quiet:.0f} s")
        elif not self._ended:
            self._timer = self._conn.loop.call_later(self._silence - quiet, self._check)

    @property
    def is_open(self) -> bool:
        return not self._ended and self._conn.error is None

    async def readline(self) -> bytes:
        """The next line with its b"\\n"; b"" once the stream ended (a last line without one
        is returned first)."""
        while (end := self._data.find(b"\n")) < 0 and not self._ended:
            await self._fill()
        if end < 0:
            line = bytes(self._data)
            self._data.clear()
            return line
        line = bytes(self._data[: end + 1])
        del self._data[: end + 1]
        return line

    async def _fill(self) -> None:
        if self._chunks is None:  # delimited by the connection's end
            self._ended = self._conn.eof
            if not self._ended:
                await self._conn.more()
            self._data += self._conn.buf
            self._conn.buf.clear()
            return
        data = await self._chunks.next()
        if data is None:
            self._ended = True
        else:
            self._data += data

    def close(self) -> None:
        self._ended = True
        self._timer.cancel()
        self._conn.close()

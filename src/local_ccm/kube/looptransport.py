"""Requests to the API server on the running event loop: `kube.transport`'s semantics (a
keep-alive pool, a connection of its own per watch, the credential per request and one retry
after a 401, one reconnect after a stale keep-alive connection, `close()` ending everything,
failures translated into `Transient`) over `kube.loophttp` connections.

Why a second transport: `kube.aio.AsyncClient` runs each blocking request in a worker thread and
each watch in a reader thread, and every hand-over costs two thread wake-ups; at a controller's
rate limit every request and watch event arrives alone, so nothing amortises them. Measured on
node-ipam-controller at 5 QPS (docs/benchmarks.md, "Where IPAM's CPU per Node goes"): a PATCH
cost 0.9 ms of CPU through a thread and 0.5 ms here.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from urllib.parse import urlsplit

from local_ccm.kube.config import Authenticator, ClusterConfig, ConfigError, Credential
from local_ccm.kube.errors import Unauthorized, error_from_response
from local_ccm.kube.http1 import wire_host
from local_ccm.kube.loophttp import (
    Connection,
    LoopStream,
    Opening,
    read_body,
    read_head,
    will_close,
)
from local_ccm.kube.request import Request, Response
from local_ccm.kube.transport import (
    MAX_IDLE,
    STALE_ERRORS,
    client_closed,
    make_ssl_context,
    set_keepalive,
    transport_error,
)

_SENDS_BODY = frozenset({"POST", "PUT", "PATCH"})


class LoopTransport:
    """The pool and the requests of one client; every method on the event loop."""

    def __init__(self, config: ClusterConfig, *, user_agent: str) -> None:
        url = urlsplit(config.server)
        self._config, self._https = config, url.scheme == "https"
        self._host, self._port = url.hostname or "", url.port or (443 if self._https else 80)
        self._base = url.path.rstrip("/")
        name = f"[{self._host}]" if ":" in self._host else self._host
        self._host_header = name if url.port is None else f"{name}:{url.port}"
        self._user_agent = user_agent
        self._auth = Authenticator(config)
        self._idle: list[Connection] = []
        self._busy: set[Connection] = set()
        self._opening: set[Opening] = set()
        self._closed = False
        self._ssl: tuple[Credential, ssl.SSLContext] | None = None
        if self._https and config.exec is None:  # an unusable CA or key fails at start-up
            self._context(self._auth.credential())

    # ------------------------------------------------------------ connections

    def _context(self, credential: Credential) -> ssl.SSLContext:
        key = Credential(None, credential.cert_data, credential.key_data)
        if self._ssl is None or self._ssl[0] != key:
            if self._ssl is not None:  # an exec plugin rotated the client certificate
                self._drop_idle()
            self._ssl = (key, make_ssl_context(self._config, credential))
        return self._ssl[1]

    async def _acquire(
        self, credential: Credential, fresh: bool, timeout: float
    ) -> tuple[Connection, bool]:
        if self._closed:
            raise client_closed()
        while self._idle and not fresh:
            conn = self._idle.pop()
            if conn.usable:
                self._busy.add(conn)
                return conn, True
            conn.close()
        async with asyncio.timeout(timeout):
            conn = await self._open(credential)
        self._busy.add(conn)  # close() while it was opening: close() ends it below
        if self.closed:
            conn.close()
            raise client_closed()
        return conn, False

    @property
    def closed(self) -> bool:
        return self._closed

    async def _open(self, credential: Credential) -> Connection:
        """Dial and, over TLS, handshake (bounded by the caller's timeout; ended by close())."""
        opening = Opening(asyncio.get_running_loop())
        self._opening.add(opening)
        try:
            sock = await opening.dial(self._host, self._port)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            set_keepalive(sock)
            if self._https:
                sock = self._context(credential).wrap_socket(
                    sock, server_hostname=wire_host(self._config.tls_server_name or self._host),
                    do_handshake_on_connect=False,
                )  # fmt: skip
                await opening.handshake(sock)
        except BaseException:
            opening.abort()
            raise
        finally:
            self._opening.discard(opening)
        return Connection(opening.loop, sock)

    def _release(self, conn: Connection, reuse: bool) -> None:
        self._busy.discard(conn)
        if reuse and not self._closed and conn.usable and len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.close()

    def _drop_idle(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    def close(self) -> None:
        """Close the pool and end the requests in flight (they fail at once); any later
        request fails too."""
        self._closed = True
        self._drop_idle()
        for opening in list(self._opening):
            opening.abort()
        for conn in list(self._busy):
            conn.close()
        self._busy.clear()

    # ------------------------------------------------------------ requests

    async def _credential(self) -> Credential:
        try:
            if self._config.exec is not None:  # the plugin is a program: not on the loop
                return await asyncio.to_thread(self._auth.credential)
            return self._auth.credential()
        except ConfigError as exc:
            raise Unauthorized(401, "CredentialError", str(exc)) from exc

    def _encode(self, req: Request, credential: Credential) -> bytes:
        lines = [f"{req.method} {self._base}{req.path} HTTP/1.1", f"Host: {self._host_header}",
                 "Accept: application/json", f"User-Agent: {self._user_agent}"]  # fmt: skip
        if req.content_type:
            lines.append(f"Content-Type: {req.content_type}")
        if credential.token:
            lines.append(f"Authorization: Bearer {credential.token}")
        if req.body is not None or req.method in _SENDS_BODY:
            lines.append(f"Content-Length: {len(req.body or b'')}")
        if any("\n" in line or "\r" in line for line in lines):
            raise ValueError("a request line or header contains a line break")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (req.body or b"")

    async def send(self, req: Request, timeout: float) -> Response:
        """One request; a 401 with a refreshable credential is retried once with a new one."""
        response = await self._send_once(req, timeout)
        if response.status == 401 and self._auth.refreshable:
            self._auth.invalidate()
            response = await self._send_once(req, timeout)
        return response

    async def _send_once(self, req: Request, timeout: float) -> Response:
        credential = await self._credential()
        data = self._encode(req, credential)
        for attempt in range(2):
            conn, reused, sent = None, False, False
            try:
                conn, reused = await self._acquire(credential, attempt > 0, timeout)
                sent = True
                status, headers, body = await _exchange(conn, data, timeout)
            except (OSError, TimeoutError) as exc:
                self._forget(conn)
                if self._closed:  # ended by close(): not a failure to retry
                    raise client_closed() from exc
                if isinstance(exc, STALE_ERRORS) and reused and attempt == 0:
                    self._drop_idle()  # the others are likely as stale (a server restart)
                    continue
                raise transport_error(exc, sent=sent) from exc
            except BaseException:  # cancelled mid-request: the connection is unusable
                self._forget(conn)
                raise
            self._release(conn, reuse=not will_close(status, headers))
            return Response(status, body, headers)
        raise AssertionError("unreachable")

    def _forget(self, conn: Connection | None) -> None:
        if conn is not None:
            self._busy.discard(conn)
            conn.close()

    async def stream(self, req: Request, timeout: float, silence: float) -> LoopStream:
        """Open a streaming GET (a watch) on a connection of its own; a non-200 answer raises
        the translated error. `silence`: seconds without a byte that end the stream."""
        for attempt in range(2):
            credential = await self._credential()
            conn = None
            try:
                conn, _ = await self._acquire(credential, True, timeout)
                status, headers, body = await _exchange(conn, self._encode(req, credential),
                                                        timeout, head_only=True)  # fmt: skip
            except (OSError, TimeoutError) as exc:
                self._forget(conn)
                raise client_closed() if self._closed else transport_error(exc, sent=True) from exc
            except BaseException:
                self._forget(conn)
                raise
            self._busy.discard(conn)  # from here on the stream owns it
            if status == 200:
                return LoopStream(conn, headers, silence)
            conn.close()
            if status == 401 and attempt == 0 and self._auth.refreshable:
                self._auth.invalidate()
                continue
            raise error_from_response(status, body, headers.get("retry-after"))
        raise AssertionError("unreachable")


async def _exchange(
    conn: Connection, data: bytes, timeout: float, *, head_only: bool = False
) -> tuple[int, dict[str, str], bytes]:
    """Send a request and read its answer (of a 200 with `head_only`: the head alone) within
    `timeout`: past it the connection is closed and the wait fails with TimeoutError. A timer
    of the loop's own, cheaper than `asyncio.timeout` around every request."""
    timer = conn.loop.call_later(timeout, conn.expire)
    try:
        await conn.send(data)
        status, headers = await read_head(conn)
        if head_only and status == 200:
            return status, headers, b""
        return status, headers, await read_body(conn, status, headers)
    finally:
        timer.cancel()

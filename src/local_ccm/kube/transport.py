"""HTTP(S) to the apiserver over `kube.http1` connections: the only code that opens them.

A small pool of keep-alive connections serves ordinary requests; each watch gets its
own connection, whose socket ``close()`` shuts down so a blocked reader wakes at once.
``HttpTransport.close()`` interrupts every request still connecting or waiting for its answer:
a process that is stopping must not wait for an API server that does not answer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

from local_ccm.kube.config import (
    Authenticator,
    ClusterConfig,
    ConfigError,
    Credential,
    resolve_config,
)
from local_ccm.kube.errors import ApiError, Transient, Unauthorized, error_from_response
from local_ccm.kube.http1 import Connection, RemoteDisconnectedError
from local_ccm.kube.http1 import Response as HttpResponse  # the request module has a Response
from local_ccm.kube.request import Request, Response

log = logging.getLogger(__name__)

# Errors that mean "the server closed an idle keep-alive connection": on a reused
# connection the request was not processed (Go's net/http retries the same way).
# After an apiserver restart a reused TLS connection can also end in an EOF without
# close_notify (ssl.SSLEOFError), which must reconnect the same way.
MAX_IDLE = 4  # idle keep-alive connections kept per client
STALE_ERRORS = (RemoteDisconnectedError, BrokenPipeError, ConnectionResetError, ssl.SSLEOFError)


def make_ssl_context(config: ClusterConfig, credential: Credential) -> ssl.SSLContext:
    """Verify against the config's CA (only it, as client-go does) or the system store."""
    if config.ca_data:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            ctx.load_verify_locations(cadata=config.ca_data.decode("ascii", "replace"))
        except ssl.SSLError as exc:
            raise ConfigError(f"{config.source}: certificate authority is not PEM: {exc}") from exc
    else:
        ctx = ssl.create_default_context()
    if config.insecure_skip_tls_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if credential.cert_data and credential.key_data:
        _load_client_cert(ctx, credential.cert_data, credential.key_data)
    return ctx


def usable_config(kubeconfig: str, apiserver: str, env: Mapping[str, str]) -> ClusterConfig:
    """`resolve_config`, then its certificate authority and client key loaded as a client's
    first request would load them: a ``ConfigError`` at start-up, not at that request. An exec
    plugin's credentials are its own to check when it runs."""
    config = resolve_config(kubeconfig, apiserver, env)
    if urlsplit(config.server).scheme == "https" and config.exec is None:
        make_ssl_context(config, Authenticator(config).credential())
    return config


def _load_client_cert(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    with pem_files(cert, key) as (cert_path, key_path):
        try:
            ctx.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as exc:
            raise ConfigError(f"client certificate or key is unusable: {exc}") from exc


@contextlib.contextmanager
def pem_files(cert: bytes, key: bytes) -> Iterator[tuple[str, str]]:
    """`ssl` loads certificates from paths only: memory-backed files (Linux memfd; the
    controllers' root filesystem is read-only), gone after loading."""
    fds = [os.memfd_create(label) for label in ("tls.crt", "tls.key")]
    try:
        for fd, data in zip(fds, (cert, key), strict=True):
            os.write(fd, data)
        yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
    finally:
        for fd in fds:
            os.close(fd)


# Probe after 30 s idle, every 10 s, give up after 3 unanswered: a dead peer ends the
# connection within about a minute (Go's net/http dialer probes every 15 s).
KEEPALIVE = ((socket.TCP_KEEPIDLE, 30), (socket.TCP_KEEPINTVL, 10), (socket.TCP_KEEPCNT, 3))


class HttpStream:
    """A streaming response (a watch): lines until the server ends it or ``close()``.

    ``close()`` from another thread only shuts the socket down (which wakes the
    blocked read); the reading thread itself closes the connection, so no thread ever
    frees a socket another one is reading from.
    """

    def __init__(self, conn: Connection, resp: HttpResponse):
        self._conn, self._resp = conn, resp
        self._lock = threading.Lock()
        self._closed = False
        self._reading = False

    def lines(self) -> Iterator[bytes]:
        with self._lock:
            if self._closed:
                self._conn.close()
                return
            self._reading = True
        try:
            while not self.closed:
                line = self._resp.readline()
                if not line:
                    return
                yield line
        except (OSError, ValueError) as exc:
            if self.closed:
                return
            raise Transient(0, "StreamBroken", str(exc) or type(exc).__name__) from exc
        finally:
            with self._lock:
                self._closed, self._reading = True, False
            self._conn.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Safe from any thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            reading = self._reading
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if not reading:
            self._conn.close()


class HttpTransport:
    """Thread-safe; keeps at most ``MAX_IDLE`` idle keep-alive connections."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        user_agent: str,
    ) -> None:
        url = urlsplit(config.server)
        self._config = config
        self._https = url.scheme == "https"
        self._host, self._port = url.hostname or "", url.port
        self._base = url.path.rstrip("/")
        self._user_agent = user_agent
        self._auth = Authenticator(config)
        self._lock = threading.Lock()
        self._idle: list[Connection] = []
        self._busy: set[Connection] = set()  # requests waiting for answers
        self._closed = False
        self._ssl: tuple[Credential, ssl.SSLContext] | None = None
        if self._https and config.exec is None:
            # Fail at start-up, with a ConfigError, on an unusable CA or client key.
            self._context(self._auth.credential())

    # -------------------------------------------------------------- connections

    def _context(self, credential: Credential) -> ssl.SSLContext:
        with self._lock:
            key = Credential(None, credential.cert_data, credential.key_data)
            if self._ssl is None or self._ssl[0] != key:
                if self._ssl is not None:  # an exec plugin rotated the client certificate
                    self._drop_idle_locked()
                self._ssl = (key, make_ssl_context(self._config, credential))
            return self._ssl[1]

    def _new_connection(self, credential: Credential, timeout: float) -> Connection:
        context = self._context(credential) if self._https else None
        return Connection(self._host, self._port, timeout=timeout, context=context,
                          server_name=self._config.tls_server_name)  # fmt: skip

    def _acquire(
        self, credential: Credential, timeout: float, *, fresh: bool = False
    ) -> tuple[Connection, bool]:
        with self._lock:
            conn = self._idle.pop() if self._idle and not fresh else None
        if conn is not None:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            self._begin(conn)
            return conn, True
        conn = self._new_connection(credential, timeout)
        self._begin(conn)  # before connecting: close() interrupts a hung dial or handshake too
        try:
            _connect(conn)
        except Transient as exc:
            self._end(conn)
            if self._closed:  # interrupted by close(): not a failure to retry or log
                raise client_closed() from exc
            raise
        except BaseException:
            self._end(conn)
            raise
        return conn, False

    def _begin(self, conn: Connection) -> None:
        """Mark `conn` as waiting for an answer, so close() can wake it; refused once closed."""
        with self._lock:
            if not self._closed:
                self._busy.add(conn)
                return
        conn.close()
        raise client_closed()

    def _end(self, conn: Connection) -> None:
        with self._lock:
            self._busy.discard(conn)

    def _release(self, conn: Connection) -> None:
        # A request still running when close() was called must not park its connection in a
        # pool nobody will drain again (it would leak the socket).
        with self._lock:
            self._busy.discard(conn)
            if not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def _drop_idle_locked(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    def close(self) -> None:
        """Close the pool and end the requests in flight: their sockets are shut down, which
        wakes the threads blocked on them (those threads close the connections); any later
        request fails at once."""
        with self._lock:
            self._closed = True
            self._drop_idle_locked()
            busy, self._busy = list(self._busy), set()
        for conn in busy:
            conn.interrupt()

    # -------------------------------------------------------------- requests

    def _headers(self, req: Request, credential: Credential) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self._user_agent}
        if req.content_type:
            headers["Content-Type"] = req.content_type
        if credential.token:
            headers["Authorization"] = f"Bearer {credential.token}"
        return headers

    def _credential(self) -> Credential:
        try:
            return self._auth.credential()
        except ConfigError as exc:
            raise Unauthorized(401, "CredentialError", str(exc)) from exc

    def send(self, req: Request, timeout: float) -> Response:
        """One request; a 401 with a refreshable credential is retried once with a new one."""
        response = self._send_once(req, timeout)
        if response.status == 401 and self._auth.refreshable:
            log.info("401 from the apiserver: refreshing credentials and retrying once")
            self._auth.invalidate()
            response = self._send_once(req, timeout)
        return response

    def _send_once(self, req: Request, timeout: float) -> Response:
        credential = self._credential()
        headers = self._headers(req, credential)
        for attempt in range(2):
            conn, reused = self._acquire(credential, timeout, fresh=attempt > 0)
            try:
                conn.request(req.method, self._base + req.path, req.body, headers)
                resp = conn.getresponse()
                body = resp.read()
            except OSError as exc:
                self._end(conn)
                conn.close()
                if self._closed:  # ended by close(): not a failure to retry or log
                    raise client_closed() from exc
                if isinstance(exc, STALE_ERRORS) and reused and attempt == 0:
                    # The others are likely as stale (an apiserver restart): drop them all.
                    log.debug("keep-alive connection was closed by the server; reconnecting")
                    with self._lock:
                        self._drop_idle_locked()
                    continue
                raise transport_error(exc, sent=True) from exc
            if resp.will_close:
                self._end(conn)
                conn.close()
            else:
                self._release(conn)
            log.debug("%s %s -> %d", req.method, req.path.split("?")[0], resp.status)
            return Response(resp.status, body, resp.headers)
        raise AssertionError("unreachable")

    def stream(self, req: Request, timeout: float) -> HttpStream:
        """Open a streaming GET; a non-200 answer raises the translated error."""
        for attempt in range(2):
            credential = self._credential()
            conn, _ = self._acquire(credential, timeout, fresh=True)
            try:
                headers = self._headers(req, credential)
                conn.request(req.method, self._base + req.path, None, headers)
                resp = conn.getresponse()
            except OSError as exc:
                conn.close()
                raise transport_error(exc, sent=True) from exc
            finally:
                self._end(conn)  # from here on the stream's own close() wakes its reader
            if resp.status == 200:
                return HttpStream(conn, resp)
            body = resp.read()
            conn.close()
            if resp.status == 401 and attempt == 0 and self._auth.refreshable:
                self._auth.invalidate()
                continue
            raise error_from_response(resp.status, body, resp.getheader("retry-after"))
        raise AssertionError("unreachable")


def _connect(conn: Connection) -> None:
    """Connect now, so a failure here is known to have sent nothing."""
    try:
        conn.connect()
        assert conn.sock is not None
        set_keepalive(conn.sock)
    except OSError as exc:
        conn.close()
        raise transport_error(exc, sent=False) from exc


def set_keepalive(sock: socket.socket) -> None:
    """TCP keepalive: the kernel probes an idle connection (a watch between bookmarks) and
    ends one whose peer is gone, without waking this process."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in KEEPALIVE:
        sock.setsockopt(socket.IPPROTO_TCP, option, value)


def client_closed() -> ApiError:
    """Not Transient: a closed client is never retried."""
    return ApiError(0, "ClientClosed", "the client was closed")


def transport_error(exc: BaseException, *, sent: bool) -> Transient:
    if isinstance(exc, TimeoutError | socket.timeout):
        reason = "Timeout"
    elif isinstance(exc, ssl.SSLError):
        reason = "TLSError"
    else:
        reason = "ConnectionError"
    return Transient(0, reason, str(exc) or type(exc).__name__, request_sent=sent)

"""The Redfish client for one BMC endpoint: `RedfishClient`.

The component's one module that speaks HTTP and TLS (the import contracts name it as the
exception next to `local_ccm.kube`). Blocking `http.client` on a socket this module dials
itself, run in a worker thread (the executor given, else the event loop's default one):

- **One persistent connection** (HTTP/1.1 keep-alive). An answer with ``Connection: close``
  (sushy-tools' server sends one with every answer) ends it and the next request dials anew;
  a request that fails on a *reused* connection before any answer (the BMC closed it while
  idle) is sent once more on a new one. The reset types sent (ForceOff, On) name a target
  state, so a repeat changes nothing.
- **One request in flight**: an `asyncio.Lock` queues the callers, a `threading.Lock` keeps
  the wire to one thread even when a cancelled caller's thread is still finishing.
- **Bounded waits**: TCP connect and the TLS handshake within ``connect_timeout``, each read
  within ``read_timeout``, a whole call within ``call_timeout``; cancelling a call, or its
  running out of time, shuts the socket down, so its thread ends at once.
- **Auth "auto"**: the service root (readable without credentials) names a sessions
  collection -> a Redfish session (``X-Auth-Token``, made again once on a 401, DELETEd by
  `close`); no session service, or one that will not make a session -> HTTP Basic on every
  request. ``auth="session"`` and ``auth="basic"`` force one. Credentials are never logged.
- **Every failure is a `BmcError`** of one of the kinds in `core.errors`; no socket, TLS or
  HTTP exception escapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.client
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import Final, Literal, TypeVar

from local_ccm import __version__
from local_ccm.bmc.core.address import Address
from local_ccm.bmc.core.errors import BmcError, ErrorKind, error_of_status, shorten
from local_ccm.bmc.core.service import (
    ROOT_PATH,
    AuthMode,
    Credentials,
    Session,
    auth_headers,
    login_body,
    parse_session,
    sessions_path,
)
from local_ccm.bmc.core.system import System, parse_system, plan_reset
from local_ccm.clock import Clock, SystemClock
from local_ccm.records import dataclass

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_BODY: Final = 1 << 20  # a System is a few KiB; anything past this is not one
DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_READ_TIMEOUT: Final = 10.0
# A whole call (the service root, a login, the request, a login again): a BMC that trickles its
# answer a byte at a time never trips the read timeout, which bounds each read only.
DEFAULT_CALL_TIMEOUT: Final = 30.0
USER_AGENT: Final = f"local-ccm/{__version__}"
JSON: Final = "application/json"
# Failures that mean the peer closed or reset the connection (http.client's RemoteDisconnected
# is a ConnectionResetError).
_DROPPED = (
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
    ssl.SSLEOFError,
    ssl.SSLZeroReturnError,
)


@dataclass(frozen=True)
class Exchange:
    """One HTTP request to the BMC and how it ended, for latency metrics."""

    method: str
    path: str
    status: int  # 0 when no answer came
    error: ErrorKind | None
    seconds: float
    new_connection: bool


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes


def tls_context(ca_pem: str | None, *, verify: bool = True) -> ssl.SSLContext:
    """A client context trusting exactly ``ca_pem`` (PEM text of one or more CAs), the
    system's trust store without it, or nothing at all when ``verify`` is false."""
    if not verify:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        return ssl.create_default_context(cadata=ca_pem) if ca_pem else ssl.create_default_context()
    except (ssl.SSLError, ValueError) as exc:
        raise BmcError("tls", f"the CA bundle is not usable PEM: {exc}") from None


class _Wire:
    """One persistent HTTP/1.1 connection to one BMC, used by one thread at a time."""

    def __init__(
        self,
        address: Address,
        context: ssl.SSLContext | None,
        connect_timeout: float,
        read_timeout: float,
    ) -> None:
        self._address, self._context = address, context
        self._connect_timeout, self._read_timeout = connect_timeout, read_timeout
        self._conn: http.client.HTTPConnection | None = None
        self._sock: socket.socket | None = None
        self._sock_lock = threading.Lock()  # the event loop's interrupt() reads _sock
        self.cancelled = threading.Event()  # the current call's: set by interrupt()
        self.opened = 0
        self.fresh = False  # the last request went out on a new connection

    def exchange(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> _Answer:
        if self.cancelled.is_set():
            # The call was cancelled or ran out of time while an earlier request of it was
            # answered: none of its later requests (a login, the System, a reset) goes out.
            raise _failure("timeout", f"{method} {path}: not sent, the call was given up")
        for _ in range(2):
            self.fresh = self._conn is None
            conn = self._conn or self._open()
            try:
                return self._send(conn, method, path, body, headers)
            except _DROPPED as exc:
                self.close()
                if self.fresh or self.cancelled.is_set():
                    raise _failure("unreachable", f"{method} {path}: the BMC dropped the "
                                   f"connection ({_why(exc)})") from None  # fmt: skip
                # The BMC closed the idle connection before our request reached it: once more.
        raise AssertionError("unreachable: the second attempt is on a fresh connection")

    def _send(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
    ) -> _Answer:
        what = f"{method} {path}"
        try:
            conn.request(method, path, body=body, headers=dict(headers))
            response = conn.getresponse()
            data = response.read(MAX_BODY + 1)
        except _DROPPED:
            raise
        except TimeoutError:
            self.close()
            raise _failure("timeout", f"{what}: no answer within {self._read_timeout:g}s") from None
        except http.client.HTTPException as exc:
            self.close()
            raise _failure(
                "invalid-response", f"{what}: not an HTTP answer ({_why(exc)})"
            ) from None
        except OSError as exc:
            self.close()
            raise _failure("unreachable", f"{what}: {_why(exc)}") from None
        if len(data) > MAX_BODY or conn.sock is None:
            # Too long to be ours (the rest is unread), or the BMC said Connection: close.
            self.close()
        answer_headers = {name.lower(): value for name, value in response.getheaders()}
        if len(data) > MAX_BODY:
            raise _failure("invalid-response", f"{what}: the answer is over {MAX_BODY} bytes")
        return _Answer(response.status, answer_headers, data)

    def _open(self) -> http.client.HTTPConnection:
        sock = self._dial()
        address = self._address
        conn: http.client.HTTPConnection
        if self._context is not None:
            conn = http.client.HTTPSConnection(address.host, address.port, context=self._context)
        else:
            conn = http.client.HTTPConnection(address.host, address.port)
        conn.sock = sock
        conn.auto_open = 0  # a closed connection is dialled here, never by http.client
        self._conn = conn
        self.opened += 1
        return conn

    def _dial(self) -> socket.socket:
        host, port = self._address.host, self._address.port
        try:
            sock = socket.create_connection((host, port), timeout=self._connect_timeout)
        except TimeoutError:
            raise _failure("unreachable", f"no TCP connection to {host} port {port} within "
                           f"{self._connect_timeout:g}s") from None  # fmt: skip
        except OSError as exc:
            raise _failure("unreachable", f"connect to {host} port {port}: {_why(exc)}") from None
        self._publish(sock)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._context is None:
            sock.settimeout(self._read_timeout)
            return sock
        try:
            tls = self._context.wrap_socket(sock, server_hostname=host)
        except BaseException as exc:
            sock.close()
            self._publish(None)
            raise _tls_failure(exc, host, self._connect_timeout) from None
        tls.settimeout(self._read_timeout)
        self._publish(tls)
        return tls

    def _publish(self, sock: socket.socket | None) -> None:
        with self._sock_lock:
            self._sock = sock

    def interrupt(self) -> None:
        """From another thread: end the request in flight (its read fails at once, and it is
        not sent again: the caller set its call's ``cancelled`` first)."""
        with self._sock_lock:
            sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        self._publish(None)
        if conn is not None:
            conn.close()


class RedfishClient:
    """The System at one `Address`: read it, reset it. Every method may raise `BmcError`."""

    def __init__(
        self,
        address: Address,
        credentials: Credentials,
        *,
        ca_pem: str | None = None,
        verify: bool = True,
        auth: AuthMode = "auto",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        clock: Clock | None = None,
        on_exchange: Callable[[Exchange], None] | None = None,
        executor: Executor | None = None,
    ) -> None:
        """``ca_pem``: the CAs to trust (PEM text; None: the system's); ``verify=False`` turns
        certificate checks off, only when asked. ``on_exchange`` is called on the event loop
        for every HTTP request made, with its latency. ``executor`` runs the blocking requests
        (None: the event loop's default one); a controller with many BMCs gives them a pool of
        their own, so slow BMCs never hold the threads its API client needs."""
        self.address = address
        context = tls_context(ca_pem, verify=verify) if address.scheme == "https" else None
        self._wire = _Wire(address, context, connect_timeout, read_timeout)
        self._credentials = credentials
        self._call_timeout = call_timeout
        self._auth: AuthMode = auth
        self._in_use: Literal["basic", "session"] | None = None
        self._sessions: str | None = None
        self._session: Session | None = None
        self._orphan: Session | None = None  # made with credentials since replaced
        self._system: System | None = None
        self._clock: Clock = clock or SystemClock()
        self._on_exchange = on_exchange
        self._executor = executor
        self._lock = asyncio.Lock()
        self._busy = threading.Lock()

    @property
    def connections_opened(self) -> int:
        """TCP connections dialled so far (a keep-alive BMC needs one)."""
        return self._wire.opened

    @property
    def auth_in_use(self) -> Literal["basic", "session"] | None:
        """How requests are authenticated, once the first request decided it."""
        return self._in_use

    async def get_system(self) -> System:
        """GET the System; ``not-found`` when its path answers 404 (the System is gone)."""
        return await self._run(self._get_system)

    async def reset(self, reset_type: str) -> None:
        """POST the System's reset action with ``reset_type`` (``ForceOff``, ``On``), to the
        target the last `get_system` read (read first when there was none)."""
        await self._run(lambda exchanges: self._reset(reset_type, exchanges))

    def set_credentials(self, credentials: Credentials) -> None:
        """Rotated credentials: the next request authenticates with them (a session made with
        the old ones is deleted first)."""
        self._credentials = credentials
        if self._session is not None:
            self._orphan, self._session = self._session, None
        self._in_use = None

    async def close(self) -> None:
        """Log out of the Redfish session, if any, and close the connection."""
        await self._run(self._close)

    # ------------------------------------------------------------ the event loop's side

    async def _run(self, work: Callable[[list[Exchange]], T]) -> T:
        async with self._lock:
            exchanges: list[Exchange] = []
            call = threading.Event()
            try:
                blocking = functools.partial(self._guarded, work, exchanges, call)
                loop = asyncio.get_running_loop()
                running = loop.run_in_executor(self._executor, blocking)
                return await asyncio.wait_for(running, self._call_timeout)
            except asyncio.CancelledError:
                call.set()
                self._wire.interrupt()
                raise
            except TimeoutError:  # wait_for's: the thread's own timeouts are BmcErrors
                call.set()
                self._wire.interrupt()
                raise BmcError("timeout", f"no complete answer within {self._call_timeout:g}s "
                               "(the BMC answers too slowly)") from None  # fmt: skip
            finally:
                if self._on_exchange is not None:
                    for exchange in list(exchanges):
                        self._on_exchange(exchange)

    def _guarded(
        self, work: Callable[[list[Exchange]], T], exchanges: list[Exchange], call: threading.Event
    ) -> T:
        with self._busy:
            if call.is_set():  # cancelled while an earlier call's thread held the wire
                raise BmcError("unreachable", "cancelled before it was sent")
            self._wire.cancelled = call
            return work(exchanges)

    # ------------------------------------------------------------ the worker thread's side

    def _get_system(self, exchanges: list[Exchange]) -> System:
        path = self.address.system_path
        answer = self._authorized("GET", path, None, exchanges)
        if not 200 <= answer.status < 300:
            raise self._error(answer, f"GET {path}", gone_on_404=True)
        system = parse_system(answer.body, path)
        if isinstance(system, BmcError):
            raise system
        self._system = system
        return system

    def _reset(self, reset_type: str, exchanges: list[Exchange]) -> None:
        system = self._system or self._get_system(exchanges)
        plan = plan_reset(system, reset_type)
        if isinstance(plan, BmcError):
            raise plan
        answer = self._authorized("POST", plan.path, plan.body, exchanges)
        if not 200 <= answer.status < 300:
            raise self._error(answer, f"POST {plan.path} ({reset_type})", gone_on_404=False)
        log.info("%s: reset %s requested", self.address, reset_type)

    def _close(self, exchanges: list[Exchange]) -> None:
        try:
            for session in (self._orphan, self._session):
                if session is not None:
                    self._logout(session, exchanges)
        finally:
            self._orphan = self._session = None
            self._in_use = None
            self._wire.close()

    def _authorized(
        self, method: str, path: str, body: bytes | None, exchanges: list[Exchange]
    ) -> _Answer:
        self._settle_auth(exchanges)
        answer = self._send(method, path, body, exchanges, authorize=True)
        if answer.status == 401 and self._session is not None:
            # The session expired or the BMC restarted: one new session, one more try.
            log.debug("%s: the Redfish session was refused; logging in again", self.address)
            self._session = None
            self._login(exchanges)
            answer = self._send(method, path, body, exchanges, authorize=True)
        return answer

    def _settle_auth(self, exchanges: list[Exchange]) -> None:
        if self._orphan is not None:
            orphan, self._orphan = self._orphan, None
            self._logout(orphan, exchanges)
        if self._in_use is not None:
            return
        if self._auth == "basic":
            self._in_use = "basic"
            return
        if self._sessions is None:
            root = self._send("GET", ROOT_PATH, None, exchanges, authorize=False)
            found = sessions_path(root.body) if 200 <= root.status < 300 else None
            if found is None and self._auth == "auto":
                log.debug("%s: the service offers no Redfish sessions; HTTP Basic", self.address)
                self._in_use = "basic"
                return
            self._sessions = found or "/redfish/v1/SessionService/Sessions"
        self._login(exchanges)

    def _login(self, exchanges: list[Exchange]) -> None:
        assert self._sessions is not None
        what = f"POST {self._sessions} (new session)"
        body = login_body(self._credentials)
        answer = self._send("POST", self._sessions, body, exchanges, authorize=False)
        if answer.status in (401, 403):
            raise self._error(answer, what, gone_on_404=False)
        ok = 200 <= answer.status < 300
        session = parse_session(answer.headers, answer.body) if ok else None
        if session is not None:
            self._session, self._in_use = session, "session"
            return
        if self._auth == "session":
            if ok:
                raise BmcError("invalid-response", f"{what}: the answer carries no X-Auth-Token")
            raise self._error(answer, what, gone_on_404=False)
        log.debug("%s: no Redfish session (HTTP %d); HTTP Basic", self.address, answer.status)
        self._in_use = "basic"

    def _logout(self, session: Session, exchanges: list[Exchange]) -> None:
        if session.path is None:
            return
        headers = auth_headers(self._credentials, session)
        try:
            answer = self._send("DELETE", session.path, None, exchanges, extra=headers)
        except BmcError as exc:
            log.debug("%s: deleting the Redfish session failed: %s", self.address, exc)
            return
        if not 200 <= answer.status < 300 and answer.status != 404:
            log.debug("%s: deleting the Redfish session: HTTP %d", self.address, answer.status)

    def _send(
        self,
        method: str,
        path: str,
        body: bytes | None,
        exchanges: list[Exchange],
        *,
        authorize: bool = False,
        extra: Mapping[str, str] | None = None,
    ) -> _Answer:
        headers = {"Accept": JSON, "User-Agent": USER_AGENT, "OData-Version": "4.0"}
        if body is not None:
            headers["Content-Type"] = JSON
        if authorize:
            headers.update(auth_headers(self._credentials, self._session))
        headers.update(extra or {})
        start = self._clock.monotonic()
        try:
            answer = self._wire.exchange(method, path, body, headers)
        except BmcError as exc:
            self._record(exchanges, (method, path), 0, exc.kind, start)
            raise
        self._record(exchanges, (method, path), answer.status, None, start)
        return answer

    def _record(
        self, exchanges: list[Exchange], request: tuple[str, str], status: int,
        error: ErrorKind | None, start: float,
    ) -> None:  # fmt: skip
        seconds = self._clock.monotonic() - start
        method, path = request
        exchanges.append(Exchange(method, path, status, error, seconds, self._wire.fresh))

    def _error(self, answer: _Answer, what: str, *, gone_on_404: bool) -> BmcError:
        return error_of_status(
            answer.status,
            answer.body,
            what=what,
            gone_on_404=gone_on_404,
            retry_after=answer.headers.get("retry-after"),
            now=self._clock.now(),
            location=answer.headers.get("location"),
        )


def _failure(kind: ErrorKind, message: str) -> BmcError:
    return BmcError(kind, shorten(message))


def _tls_failure(exc: BaseException, host: str, timeout: float) -> BaseException:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return _failure("tls", f"{host}: certificate refused: {exc.verify_message}")
    if isinstance(exc, ssl.SSLError):
        return _failure("tls", f"{host}: TLS handshake failed: {exc.reason or exc}")
    if isinstance(exc, TimeoutError):
        return _failure("timeout", f"{host}: no TLS handshake within {timeout:g}s")
    if isinstance(exc, OSError):
        return _failure("unreachable", f"{host}: TLS handshake: {_why(exc)}")
    return exc  # KeyboardInterrupt and the like go on as they are


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__

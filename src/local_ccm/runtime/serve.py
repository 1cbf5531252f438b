"""The metrics and health HTTP server shared by the three binaries.

`/metrics` is the Prometheus exposition of a per-process `CollectorRegistry`;
`/healthz` and `/readyz` run registered checks and answer kube-apiserver style:
200 `ok`, or 503 listing the failing checks; `?verbose` lists every check as
`[+]name ok` / `[-]name failed: reason`.

The server runs in its own daemon thread (stdlib `ThreadingHTTPServer`), so a
stuck event loop cannot stop `/healthz` from answering "not healthy". Checks are
therefore called from that thread: they must only read simple state (a
timestamp, a flag), never touch the event loop.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from local_ccm.logs import V4
from local_ccm.runtime.metricsauth import METRICS_PATH, Verdict
from local_ccm.validate import BindAddress, parse_bind_address

log = logging.getLogger(__name__)

Check = Callable[[], tuple[bool, str]]
# Decides a /metrics request from its Authorization header (`runtime.metricsauth.MetricsAuth`).
Guard = Callable[[str | None], Verdict]
TLS_HANDSHAKE_TIMEOUT = 10.0


class Checks:
    """Named health checks; thread-safe to add to while the server runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checks: dict[str, Check] = {}

    def add(self, name: str, check: Check) -> None:
        with self._lock:
            self._checks[name] = check

    def run(self) -> list[tuple[str, bool, str]]:
        """(name, ok, detail) for every check; a check that raises has failed."""
        with self._lock:
            checks = list(self._checks.items())
        return [(name, *_run_check(check)) for name, check in checks]


def _run_check(check: Check) -> tuple[bool, str]:
    try:
        ok, detail = check()
    except Exception as exc:  # a broken check must fail the probe, not the server
        return False, f"check raised {type(exc).__name__}: {exc}"
    return bool(ok), detail


def render_checks(path: str, results: Iterable[tuple[str, bool, str]], verbose: bool) -> str:
    """The body kube-apiserver would answer for `path` (`/healthz` or `/readyz`)."""
    results = list(results)
    healthy = all(ok for _, ok, _ in results)
    if healthy and not verbose:
        return "ok\n"
    lines = [
        f"[+]{name} ok" if ok else f"[-]{name} failed: {detail or 'no reason given'}"
        for name, ok, detail in results
        if verbose or not ok
    ]
    lines.append(f"{path.lstrip('/')} check {'passed' if healthy else 'failed'}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Routes:
    """What one server answers: metrics when `registry` is set, health when checks are;
    `guard`, when set, must allow a request before metrics are served."""

    registry: CollectorRegistry | None = None
    healthz: Checks | None = None
    readyz: Checks | None = None
    guard: Guard | None = None


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        routes = self.server.routes
        checks = {"/healthz": routes.healthz, "/readyz": routes.readyz}.get(url.path)
        if checks is not None:
            self._health(url.path, checks, "verbose" in parse_qs(url.query, keep_blank_values=True))
        elif url.path == METRICS_PATH and routes.registry is not None:
            self._metrics(routes.registry)
        else:
            self._reply(404, "text/plain; charset=utf-8", b"404 page not found\n")

    def _health(self, path: str, checks: Checks, verbose: bool) -> None:
        results = checks.run()
        status = 200 if all(ok for _, ok, _ in results) else 503
        body = render_checks(path, results, verbose).encode()
        self._reply(status, "text/plain; charset=utf-8", body)

    def _metrics(self, registry: CollectorRegistry) -> None:
        if not self._guarded(self.server.routes.guard):
            return
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        self._reply(200, content_type, encoder(registry))

    def _guarded(self, guard: Guard | None) -> bool:
        """True when the request may go on; otherwise the refusal has been sent."""
        if guard is None:
            return True
        try:
            verdict = guard(self.headers.get("Authorization"))
        except Exception as exc:  # a broken guard refuses, it never serves or crashes
            log.error("metrics authorization failed: %s: %s", type(exc).__name__, exc)
            verdict = Verdict(500, "metrics authorization failed")
        if verdict.allowed:
            return True
        self._reply(verdict.status, "text/plain; charset=utf-8", f"{verdict.message}\n".encode())
        return False

    def _reply(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.log(V4, "http %s " + format, self.client_address[0], *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, family: socket.AddressFamily, address: tuple[str, int], routes: Routes):
        self.address_family = family
        self.routes = routes
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6 and self.server_address[0] == "::":
            # `:port` means every address of both families: one dual-stack socket.
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def finish_request(self, request: Any, client_address: Any) -> None:
        # TLS: the handshake runs here, in the request's own thread, not in accept().
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(TLS_HANDSHAKE_TIMEOUT)
            try:
                request.do_handshake()
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                log.log(V4, "https %s handshake failed: %s", client_address[0], exc)
                return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # One line instead of socketserver's traceback on stderr (a client hung up, …).
        log.log(V4, "http %s request failed", client_address[0], exc_info=True)


def _bind(address: BindAddress, routes: Routes) -> _Server:
    if address.host is None:
        try:
            return _Server(socket.AF_INET6, ("::", address.port), routes)
        except OSError as exc:
            if exc.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT):
                raise
            log.info("IPv6 unavailable (%s); listening on IPv4 only", exc)
            return _Server(socket.AF_INET, ("0.0.0.0", address.port), routes)
    family = socket.AF_INET6 if address.host.version == 6 else socket.AF_INET
    return _Server(family, (str(address.host), address.port), routes)


class HttpServer:
    """One listening server in a daemon thread, HTTPS when `tls` is given; `close()` stops it."""

    def __init__(
        self, address: BindAddress, routes: Routes, tls: ssl.SSLContext | None = None
    ) -> None:
        self._server = _bind(address, routes)
        if tls is not None:
            self._server.socket = tls.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._server.timeout = 0
        self._wake, self._waker = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name=f"http-{self.port}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        """Block until a connection or `close()`: unlike `serve_forever`, which wakes every
        `poll_interval` to look for a shutdown request, an idle server costs no CPU at all."""
        with selectors.DefaultSelector() as selector:
            selector.register(self._server, selectors.EVENT_READ)
            selector.register(self._wake, selectors.EVENT_READ)
            while True:
                ready = [key.fileobj for key, _ in selector.select()]
                if self._wake in ready:
                    return
                self._server.handle_request()  # timeout 0: never blocks past the ready one

    @property
    def port(self) -> int:
        """The bound port (the ephemeral one when asked for port 0)."""
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._waker.send(b"x")
        self._thread.join()
        self._server.server_close()
        self._wake.close()
        self._waker.close()


@dataclass(frozen=True)
class Servers:
    """The metrics and health servers of one process (one, two or none)."""

    servers: list[HttpServer]
    metrics: HttpServer | None
    health: HttpServer | None

    def close(self) -> None:
        for server in self.servers:
            server.close()


class BindError(Exception):
    """A listen address that cannot be bound. Bad input, like a bad flag (exit 2): the message
    names the flag, the address and why, e.g.
    ``--health-probe-bind-address=127.0.0.1:8081: address already in use``."""


# Why a bind fails, in words that say what to change; other errors keep the system's text.
_BIND_REASONS = {
    errno.EADDRINUSE: "address already in use",
    errno.EADDRNOTAVAIL: "address not available: no interface of this host has it",
    errno.EACCES: "permission denied: ports below 1024 need CAP_NET_BIND_SERVICE",
}


def bind_error(flags: Iterable[str], address: str, exc: OSError) -> BindError:
    """The one-line error for `address` (given by each of `flags`) that failed with `exc`."""
    reason = _BIND_REASONS.get(exc.errno or 0) or exc.strerror or str(exc)
    given = ", ".join(f"--{flag}={address}" for flag in dict.fromkeys(flags))
    return BindError(f"{given}: {reason}")


def _listen(
    address: BindAddress,
    routes: Routes,
    flags: Iterable[str],
    given: str,
    tls: ssl.SSLContext | None = None,
) -> HttpServer:
    try:
        return HttpServer(address, routes, tls)
    except OSError as exc:
        raise bind_error(flags, given, exc) from exc


def start_servers(
    *,
    metrics_address: str,
    health_address: str,
    registry: CollectorRegistry,
    healthz: Checks,
    readyz: Checks,
    metrics_flag: str = "metrics-bind-address",
    health_flag: str = "health-probe-bind-address",
    metrics_tls: ssl.SSLContext | None = None,
    metrics_guard: Guard | None = None,
) -> Servers:
    """Start the servers; equal plain addresses share one server serving every path.

    Addresses use `parse_bind_address` syntax (`0` disables one). With `metrics_tls`, metrics
    are HTTPS and `metrics_guard` must allow each scrape; health stays plain HTTP for the
    kubelet, so the two never share a server (the options refuse equal addresses then).
    Raises ValueError on a bad address and BindError, naming the flag (`metrics_flag`,
    `health_flag`), when a port cannot be bound.
    """
    metrics_at = parse_bind_address(metrics_address)
    health_at = parse_bind_address(health_address)
    if metrics_at is not None and metrics_at == health_at and metrics_tls is None:
        routes = Routes(registry, healthz, readyz, guard=metrics_guard)
        both = _listen(metrics_at, routes, (metrics_flag, health_flag), metrics_address)
        return Servers([both], both, both)
    started: list[HttpServer] = []
    try:
        metrics = health = None
        if metrics_at is not None:
            routes = Routes(registry=registry, guard=metrics_guard)
            metrics = _listen(metrics_at, routes, (metrics_flag,), metrics_address, metrics_tls)
            started.append(metrics)
        if health_at is not None:
            routes = Routes(healthz=healthz, readyz=readyz)
            health = _listen(health_at, routes, (health_flag,), health_address)
            started.append(health)
    except BaseException:
        for server in started:
            server.close()
        raise
    return Servers(started, metrics, health)

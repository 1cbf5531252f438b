"""The metrics and health HTTP server shared by the three binaries.

`/metrics` is the Prometheus exposition of a per-process `Registry`;
`/healthz` and `/readyz` run registered checks and answer kube-apiserver style:
200 `ok`, or 503 listing the failing checks; `?verbose` lists every check as
`[+]name ok` / `[-]name failed: reason`. `/livez` is `/healthz` under the name kube-apiserver
and controller-runtime give liveness, for probes written for them.

Each server runs in its own daemon threads (`runtime.httpd`: an acceptor and one
thread per connection), so a stuck event loop cannot stop `/healthz` from
answering "not healthy". Checks are therefore called from those threads: they
must only read simple state (a timestamp, a flag), never touch the event loop.
"""

from __future__ import annotations

import errno
import functools
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from urllib.parse import parse_qs, urlsplit

from local_ccm.records import dataclass
from local_ccm.runtime.httpd import BACKLOG, TEXT, Request, Response, Server
from local_ccm.runtime.metricsauth import METRICS_PATH, Verdict
from local_ccm.runtime.promtext import Collector, render
from local_ccm.validate import BindAddress, parse_bind_address

log = logging.getLogger(__name__)

Check = Callable[[], tuple[bool, str]]
# Decides a /metrics request from its Authorization header (`runtime.metricsauth.MetricsAuth`).
Guard = Callable[[str | None], Verdict]


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

    registry: Collector | None = None
    healthz: Checks | None = None
    readyz: Checks | None = None
    guard: Guard | None = None


def answer(routes: Routes, request: Request) -> Response:
    """The response of `routes` to a GET of `request.target`."""
    url = urlsplit(request.target)
    checks = {"/healthz": routes.healthz, "/livez": routes.healthz,
              "/readyz": routes.readyz}.get(url.path)  # fmt: skip
    if checks is not None:
        verbose = "verbose" in parse_qs(url.query, keep_blank_values=True)
        return _health(url.path, checks, verbose)
    if url.path == METRICS_PATH and routes.registry is not None:
        refused = _refusal(routes.guard, request.header("Authorization"))
        if refused is not None:
            return refused
        content_type, body = render(routes.registry, request.header("Accept") or "")
        return Response(200, content_type, body)
    return Response(404, TEXT, b"404 page not found\n")


def _health(path: str, checks: Checks, verbose: bool) -> Response:
    results = checks.run()
    status = 200 if all(ok for _, ok, _ in results) else 503
    return Response(status, TEXT, render_checks(path, results, verbose).encode())


def _refusal(guard: Guard | None, authorization: str | None) -> Response | None:
    """None when the request may go on, else the refusal to send."""
    if guard is None:
        return None
    try:
        verdict = guard(authorization)
    except Exception as exc:  # a broken guard refuses, it never serves or crashes
        log.error("metrics authorization failed: %s: %s", type(exc).__name__, exc)
        verdict = Verdict(500, "metrics authorization failed")
    if verdict.allowed:
        return None
    return Response(verdict.status, TEXT, f"{verdict.message}\n".encode())


def _socket(family: socket.AddressFamily, address: tuple[str, int]) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and address[0] == "::":
            # `:port` means every address of both families: one dual-stack socket.
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


def _bind(address: BindAddress) -> socket.socket:
    if address.host is None:
        try:
            return _socket(socket.AF_INET6, ("::", address.port))
        except OSError as exc:
            if exc.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT):
                raise
            log.info("IPv6 unavailable (%s); listening on IPv4 only", exc)
            return _socket(socket.AF_INET, ("0.0.0.0", address.port))
    family = socket.AF_INET6 if address.host.version == 6 else socket.AF_INET
    return _socket(family, (str(address.host), address.port))


class HttpServer:
    """One listening server in a daemon thread, HTTPS when `tls` is given; `close()` stops it."""

    def __init__(
        self, address: BindAddress, routes: Routes, tls: ssl.SSLContext | None = None
    ) -> None:
        listener = _bind(address)
        try:
            self._server = Server(listener, functools.partial(answer, routes), tls)
        except BaseException:  # no thread or wake socket (out of descriptors): free the port
            listener.close()
            raise

    @property
    def port(self) -> int:
        """The bound port (the ephemeral one when asked for port 0)."""
        return self._server.port

    def close(self) -> None:
        self._server.close()


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
    registry: Collector,
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

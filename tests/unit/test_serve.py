"""The metrics and health server: bind addresses, check rendering, routing, shutdown.

These tests bind loopback ports (the only I/O in the unit tier, allowed for this module).
"""

from __future__ import annotations

import errno
import http.client
import os
import socket
from collections.abc import Iterator
from ipaddress import ip_address

import pytest

from local_ccm.runtime.promtext import Counter, Registry
from local_ccm.runtime.serve import (
    BindError,
    Checks,
    HttpServer,
    Routes,
    Servers,
    bind_error,
    render_checks,
    start_servers,
)
from local_ccm.validate import BindAddress, parse_bind_address


def fetch(port: int, path: str, host: str = "127.0.0.1") -> tuple[int, str, str]:
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read().decode()
    finally:
        conn.close()


@pytest.fixture
def registry() -> Registry:
    registry = Registry()
    Counter("local_ccm_test_things", "things counted", registry=registry).inc(3)
    return registry


@pytest.fixture
def checks() -> tuple[Checks, Checks]:
    healthz, readyz = Checks(), Checks()
    healthz.add("loop", lambda: (True, ""))
    readyz.add("config", lambda: (True, ""))
    readyz.add("watch", lambda: (False, "disconnected for 75s"))
    return healthz, readyz


@pytest.fixture
def one_server(registry: Registry, checks: tuple[Checks, Checks]) -> Iterator[Servers]:
    servers = start_servers(
        metrics_address="127.0.0.1:0",
        health_address="127.0.0.1:0",
        registry=registry,
        healthz=checks[0],
        readyz=checks[1],
    )
    yield servers
    servers.close()


# ------------------------------------------------------------------ addresses


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        (":8090", BindAddress(None, 8090)),
        ("127.0.0.1:0", BindAddress(ip_address("127.0.0.1"), 0)),
        ("[::1]:8081", BindAddress(ip_address("::1"), 8081)),
        ("0", None),
    ],
)
def test_bind_addresses_parse(text: str, parsed: BindAddress | None) -> None:
    assert parse_bind_address(text) == parsed


@pytest.mark.parametrize(
    "text", ["", "8090", "::1:8080", "host:65536", "host:-1", "host:", "[nothost]:80", "1"]
)
def test_bad_bind_addresses_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_bind_address(text)


# ------------------------------------------------------------------ rendering


def test_check_bodies_follow_kube_apiserver() -> None:
    passing = [("loop", True, "")]
    failing = [("loop", True, ""), ("watch", False, "disconnected")]
    assert render_checks("/healthz", passing, verbose=False) == "ok\n"
    assert render_checks("/healthz", passing, verbose=True) == "[+]loop ok\nhealthz check passed\n"
    assert render_checks("/readyz", failing, verbose=False) == (
        "[-]watch failed: disconnected\nreadyz check failed\n"
    )
    assert render_checks("/readyz", failing, verbose=True) == (
        "[+]loop ok\n[-]watch failed: disconnected\nreadyz check failed\n"
    )


def test_a_check_that_raises_has_failed() -> None:
    checks = Checks()

    def broken() -> tuple[bool, str]:
        raise RuntimeError("no state yet")

    checks.add("broken", broken)
    assert checks.run() == [("broken", False, "check raised RuntimeError: no state yet")]


# ------------------------------------------------------------------ serving


def test_healthy_endpoint_answers_ok(one_server: Servers) -> None:
    assert one_server.health is not None
    assert fetch(one_server.health.port, "/healthz") == (200, "text/plain; charset=utf-8", "ok\n")


def test_livez_is_healthz_as_kube_apiserver_names_liveness(
    one_server: Servers, checks: tuple[Checks, Checks]
) -> None:
    assert one_server.health is not None
    assert fetch(one_server.health.port, "/livez") == (200, "text/plain; charset=utf-8", "ok\n")
    checks[0].add("evaluation", lambda: (False, "last pass 200s ago"))
    status, _, body = fetch(one_server.health.port, "/livez")
    assert (status, body) == (503, "[-]evaluation failed: last pass 200s ago\nlivez check failed\n")


def test_failing_endpoint_answers_503_with_the_failing_checks(one_server: Servers) -> None:
    assert one_server.health is not None
    status, _, body = fetch(one_server.health.port, "/readyz")
    assert (status, body) == (503, "[-]watch failed: disconnected for 75s\nreadyz check failed\n")
    status, _, body = fetch(one_server.health.port, "/readyz?verbose")
    assert body == ("[+]config ok\n[-]watch failed: disconnected for 75s\nreadyz check failed\n")


def test_checks_added_while_running_are_used(
    one_server: Servers, checks: tuple[Checks, Checks]
) -> None:
    assert one_server.health is not None
    checks[0].add("evaluation", lambda: (False, "last pass 200s ago"))
    assert fetch(one_server.health.port, "/healthz")[0] == 503


def test_metrics_come_from_the_given_registry_only(one_server: Servers) -> None:
    assert one_server.metrics is not None
    status, content_type, body = fetch(one_server.metrics.port, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain; version=")
    assert "local_ccm_test_things_total 3.0" in body
    assert "process_cpu_seconds_total" not in body, "the global REGISTRY leaked in"


def test_equal_addresses_share_one_server_for_every_path(one_server: Servers) -> None:
    assert len(one_server.servers) == 1
    port = one_server.servers[0].port
    assert [fetch(port, path)[0] for path in ("/metrics", "/healthz", "/readyz", "/x")] == [
        200,
        200,
        503,
        404,
    ]


def test_different_addresses_get_separate_servers(
    registry: Registry, checks: tuple[Checks, Checks]
) -> None:
    health_port = free_port()
    servers = start_servers(
        metrics_address="127.0.0.1:0",
        health_address=f"127.0.0.1:{health_port}",
        registry=registry,
        healthz=checks[0],
        readyz=checks[1],
    )
    try:
        assert servers.metrics is not None
        assert servers.health is not None
        assert servers.health.port == health_port
        assert fetch(servers.metrics.port, "/healthz")[0] == 404
        assert fetch(servers.health.port, "/metrics")[0] == 404
        assert fetch(servers.health.port, "/healthz")[0] == 200
    finally:
        servers.close()


def test_zero_disables_a_server(registry: Registry, checks: tuple[Checks, Checks]) -> None:
    servers = start_servers(
        metrics_address="0",
        health_address="127.0.0.1:0",
        registry=registry,
        healthz=checks[0],
        readyz=checks[1],
    )
    try:
        assert servers.metrics is None
        assert len(servers.servers) == 1
    finally:
        servers.close()
    assert (
        start_servers(
            metrics_address="0",
            health_address="0",
            registry=registry,
            healthz=Checks(),
            readyz=Checks(),
        ).servers
        == []
    )


def test_all_addresses_means_both_families() -> None:
    server = HttpServer(BindAddress(None, 0), Routes(healthz=Checks()))
    try:
        assert fetch(server.port, "/healthz", host="127.0.0.1")[0] == 200
        assert fetch(server.port, "/healthz", host="::1")[0] == 200
    finally:
        server.close()


def test_ipv6_literal_binds_ipv6() -> None:
    server = HttpServer(BindAddress(ip_address("::1"), 0), Routes(healthz=Checks()))
    try:
        assert fetch(server.port, "/healthz", host="::1")[0] == 200
    finally:
        server.close()


def test_close_releases_the_port() -> None:
    server = HttpServer(BindAddress(ip_address("127.0.0.1"), 0), Routes(healthz=Checks()))
    port = server.port
    server.close()
    with pytest.raises(ConnectionRefusedError):
        fetch(port, "/healthz")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_busy_port_is_a_bind_error_naming_the_flag_and_address(
    registry: Registry, checks: tuple[Checks, Checks]
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        busy = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(BindError) as raised:
            start_servers(
                metrics_address="127.0.0.1:0",
                health_address=busy,
                registry=registry,
                healthz=checks[0],
                readyz=checks[1],
                health_flag="webserver-bind-address",
            )
    assert str(raised.value) == f"--webserver-bind-address={busy}: address already in use"


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (errno.EADDRNOTAVAIL, "address not available: no interface of this host has it"),
        (errno.EACCES, "permission denied: ports below 1024 need CAP_NET_BIND_SERVICE"),
        (errno.EMFILE, "Too many open files"),
    ],
)
def test_bind_errors_say_why_in_words(code: int, reason: str) -> None:
    error = bind_error(["metrics-bind-address"], ":80", OSError(code, os.strerror(code)))
    assert str(error) == f"--metrics-bind-address=:80: {reason}"


def test_a_shared_server_names_each_flag_once() -> None:
    flags = ["metrics-bind-address", "health-probe-bind-address", "metrics-bind-address"]
    error = bind_error(flags, ":8090", OSError(errno.EADDRINUSE, "in use"))
    assert str(error) == (
        "--metrics-bind-address=:8090, --health-probe-bind-address=:8090: address already in use"
    )

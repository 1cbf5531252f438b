"""The secure metrics server: HTTPS with a self-signed or given certificate, the guard in front
of /metrics, plain-HTTP health probes on their own port.

These tests bind loopback ports, as tests/unit/test_serve.py does; the API reviews are an
in-memory fake of the `Reviewer` protocol (the real ones: tests/integration/test_metrics_auth.py).
"""

from __future__ import annotations

import http.client
import logging
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_ccm.kube.errors import Forbidden
from local_ccm.kube.request import Obj
from local_ccm.runtime import metricscert, metricsserver
from local_ccm.runtime.metricsauth import (
    MetricsAuth,
    ReviewUnavailable,
    User,
    Verdict,
    VerdictCache,
)
from local_ccm.runtime.metricsserver import (
    CertError,
    KubeReviewer,
    SelfSignedContext,
    self_signed,
    server_tls,
)
from local_ccm.runtime.promtext import Counter, Registry
from local_ccm.runtime.serve import BindError, Checks, Servers, start_servers
from tests.support import resources as r

pytestmark = pytest.mark.unit


class Reviewer:
    def authenticate(self, token: str) -> User | None:
        if token == "down":
            raise ReviewUnavailable("connection refused")
        return User(token) if token in ("reader", "other") else None

    def may_get(self, user: User, path: str) -> bool:
        return user.name == "reader"


def https(port: int, path: str, token: str | None = None) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def plain(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def tls() -> ssl.SSLContext:
    return server_tls("", "test-host")


@pytest.fixture
def servers(tls: ssl.SSLContext) -> Iterator[Servers]:
    registry = Registry()
    Counter("local_ccm_test_things", "things counted", registry=registry).inc(3)
    healthz, readyz = Checks(), Checks()
    healthz.add("loop", lambda: (True, "ok"))
    started = start_servers(
        metrics_address="127.0.0.1:0", health_address="127.0.0.1:0", registry=registry,
        healthz=healthz, readyz=readyz, metrics_tls=tls,
        metrics_guard=MetricsAuth(Reviewer(), VerdictCache(time.monotonic)).check,
    )  # fmt: skip
    yield started
    started.close()


def ports(servers: Servers) -> tuple[int, int]:
    assert servers.metrics is not None
    assert servers.health is not None
    return servers.metrics.port, servers.health.port


def test_metrics_answer_401_403_200_over_https(servers: Servers) -> None:
    metrics, _ = ports(servers)
    assert https(metrics, "/metrics")[0] == 401
    assert https(metrics, "/metrics", "nobody")[0] == 401
    assert https(metrics, "/metrics", "other")[0] == 403
    status, body = https(metrics, "/metrics", "reader")
    assert status == 200
    assert "local_ccm_test_things_total 3.0" in body


def test_an_unanswered_review_is_503_and_the_server_keeps_serving(servers: Servers) -> None:
    metrics, _ = ports(servers)
    status, body = https(metrics, "/metrics", "down")
    assert status == 503
    assert "Traceback" not in body
    assert https(metrics, "/metrics", "reader")[0] == 200


def test_health_stays_plain_http_on_its_own_port(servers: Servers) -> None:
    metrics, health = ports(servers)
    assert plain(health, "/healthz") == (200, "ok\n")
    assert plain(health, "/metrics")[0] == 404
    assert https(metrics, "/healthz", "reader")[0] == 404


def test_plain_http_to_the_metrics_port_gets_no_metrics(servers: Servers) -> None:
    metrics, _ = ports(servers)
    with pytest.raises((http.client.HTTPException, OSError)):
        plain(metrics, "/metrics")
    assert https(metrics, "/metrics", "reader")[0] == 200  # a failed handshake harmed nothing


def test_a_guard_that_raises_refuses_with_500(tls: ssl.SSLContext) -> None:
    class Broken(MetricsAuth):
        def check(self, authorization: str | None) -> Verdict:
            raise RuntimeError("bug")

    started = start_servers(
        metrics_address="127.0.0.1:0", health_address="0", registry=Registry(),
        healthz=Checks(), readyz=Checks(), metrics_tls=tls,
        metrics_guard=Broken(Reviewer(), VerdictCache(time.monotonic)).check,
    )  # fmt: skip
    try:
        assert started.metrics is not None
        assert https(started.metrics.port, "/metrics", "reader")[0] == 500
    finally:
        started.close()


def test_a_cert_dir_is_loaded_and_a_broken_one_is_one_line(tmp_path: Path) -> None:
    cert, key = self_signed("given")
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    assert isinstance(server_tls(str(tmp_path), "ignored"), ssl.SSLContext)
    with pytest.raises(CertError, match=r"--metrics-cert-dir=.*/missing: cannot load tls.crt"):
        server_tls(str(tmp_path / "missing"), "x")
    (tmp_path / "tls.key").write_bytes(b"not a key")
    with pytest.raises(CertError) as err:
        server_tls(str(tmp_path), "x")
    assert "\n" not in str(err.value)


def test_the_certificate_is_made_in_a_child_process() -> None:
    cert, key = self_signed("node-1")
    assert cert.startswith(b"-----BEGIN CERTIFICATE-----")
    assert key.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert metricscert.main([]) == 2


def _metrics_server(tls: ssl.SSLContext) -> Servers:
    return start_servers(
        metrics_address="127.0.0.1:0", health_address="0", registry=Registry(),
        healthz=Checks(), readyz=Checks(), metrics_tls=tls,
        metrics_guard=MetricsAuth(Reviewer(), VerdictCache(time.monotonic)).check,
    )  # fmt: skip


def test_the_self_signed_certificate_is_made_on_the_first_connection() -> None:
    """Not at start-up: a process nobody scrapes never starts the certificate child."""
    context = server_tls("", "lazy-host")
    assert isinstance(context, SelfSignedContext)

    def made() -> bool:  # a call, so that type checkers do not narrow the property
        return context.loaded

    assert not made()
    started = _metrics_server(context)
    try:
        assert started.metrics is not None
        assert not made()  # listening costs nothing yet
        assert https(started.metrics.port, "/metrics", "reader")[0] == 200
        assert made()
        assert https(started.metrics.port, "/metrics", "reader")[0] == 200
    finally:
        started.close()


def test_a_certificate_that_cannot_be_made_fails_that_connection_and_is_tried_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    attempts: list[str] = []

    def flaky(name: str) -> tuple[bytes, bytes]:
        attempts.append(name)
        if len(attempts) == 1:
            raise CertError("cannot make a self-signed certificate for /metrics: boom")
        return self_signed(name)

    monkeypatch.setattr(metricsserver, "self_signed", flaky)
    context = server_tls("", "flaky-host")
    started = _metrics_server(context)
    try:
        assert started.metrics is not None
        with (
            caplog.at_level(logging.ERROR, logger=metricsserver.__name__),
            pytest.raises((ssl.SSLError, OSError)),
        ):
            https(started.metrics.port, "/metrics", "reader")
        assert "cannot make a self-signed certificate for /metrics: boom" in caplog.text
        assert https(started.metrics.port, "/metrics", "reader")[0] == 200
        assert attempts == ["flaky-host", "flaky-host"]
    finally:
        started.close()


def test_no_binary_imports_cryptography_or_pathlib() -> None:
    """`cryptography` would stay resident (about 12.6 MiB); only the certificate child loads
    it. `pathlib` (with `ntpath`) costs every process about 170 KiB: paths are `os.path`
    strings."""
    code = (
        "import sys, local_ccm.cli.agent, local_ccm.cli.lifecycle, local_ccm.cli.ipam, "
        "local_ccm.cli.manager; print(sorted(m for m in sys.modules "
        "if 'cryptography' in m or m in ('pathlib', 'ntpath')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_taken_port_is_a_bind_error_naming_the_flag(
    servers: Servers, tls: ssl.SSLContext
) -> None:
    metrics, health = ports(servers)
    for taken, flag in ((f"127.0.0.1:{metrics}", "--metrics-bind-address"),
                        (f"127.0.0.1:{health}", "--webserver-bind-address")):  # fmt: skip
        with pytest.raises(BindError, match=f"^{flag}={taken}: address already in use$"):
            start_servers(
                metrics_address=taken if "metrics" in flag else "127.0.0.1:0",
                health_address=taken if "metrics" not in flag else "127.0.0.1:0",
                registry=Registry(), healthz=Checks(), readyz=Checks(),
                metrics_tls=tls,
                metrics_guard=MetricsAuth(Reviewer(), VerdictCache(time.monotonic)).check,
                health_flag="webserver-bind-address",
            )  # fmt: skip


class FailingApi:
    """A `Creator` whose every create fails with `error`."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def create(self, res: r.Resource, body: Obj, *, timeout: float | None = None) -> Obj:
        raise self.error


def test_a_failed_review_is_unavailable_and_warned_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [0.0]
    reviewer = KubeReviewer(FailingApi(Forbidden(403, "Forbidden", "no")), now=lambda: clock[0])
    caplog.set_level(logging.DEBUG, logger="local_ccm.runtime.metricsserver")
    for _ in range(4):  # a minute of scrapes every 15 s
        with pytest.raises(ReviewUnavailable):
            reviewer.authenticate("t")
        clock[0] += 15
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "create on tokenreviews.authentication.k8s.io" in warnings[0].getMessage()
    with pytest.raises(ReviewUnavailable):
        reviewer.may_get(User("u"), "/metrics")
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_a_connection_error_is_unavailable_too() -> None:
    reviewer = KubeReviewer(FailingApi(ConnectionRefusedError(111, "refused")))
    with pytest.raises(ReviewUnavailable, match="refused"):
        reviewer.authenticate("t")


def test_the_lifecycle_and_csr_binaries_do_not_load_the_event_loop_client() -> None:
    """Only node-ipam and service-lb-ipam talk through `kube.loopclient` (and its transport):
    about 0.1 MiB of code the node-lifecycle-controller and the CSR approver never run."""
    code = (
        "import sys, local_ccm.cli.lifecycle, local_ccm.cli.csr; print(sorted(m for m in "
        "sys.modules if m.startswith('local_ccm.kube.loop')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

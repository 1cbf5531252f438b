"""The controllers' /metrics are HTTPS behind TokenReview and SubjectAccessReview (D16).

node-lifecycle-controller and node-ipam-controller run as the chart renders them (their
command, args and env, the chart's RBAC, their ServiceAccount's token) on the real apiserver:
no token is 401, a ServiceAccount token without the chart's metrics-reader ClusterRole is 403,
the ServiceAccount the chart binds to that role (`metrics.reader.serviceAccount`) gets 200 with
the Prometheus text, and /healthz stays plain HTTP for the kubelet. Started with no metrics flags
at all, neither binary answers /metrics on a non-loopback address without a token.
"""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from local_ccm.kube.client import Client, Obj
from tests.integration.deploy.conftest import ipam_renders_at
from tests.integration.deploy.release import Release, apply_identity, render
from tests.support import resources as r
from tests.support.chart import IPAM_MINIMUM_KUBE_VERSION, Helm, component
from tests.support.cleanup import Tracker
from tests.support.controlplane import ControlPlane
from tests.support.netns import NetnsFactory
from tests.support.podrun import (
    PodFields,
    argv_of,
    container_env,
    local_program,
    pod_container,
)
from tests.support.processes import Child, spawn, tail
from tests.support.waiting import eventually

READER, STRANGER = "prometheus", "stranger"
LIFECYCLE = "node-lifecycle-controller"
IPAM = "node-ipam-controller"


def get(port: int, path: str, *, token: str | None = None, tls: bool = True,
        host: str = "127.0.0.1") -> tuple[int, str]:  # fmt: skip
    """One GET; HTTPS without verification (the certificate is self-signed)."""
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=10, context=context
        )
    else:
        conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def refused_plain(port: int, host: str = "127.0.0.1") -> bool:
    """True when plain HTTP gets no answer at all (the port speaks TLS only)."""
    try:
        get(port, "/metrics", tls=False, host=host)
    except (http.client.HTTPException, OSError):
        return True
    return False


def sa_token(kube: Client, namespace: str, name: str) -> str:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600}}  # fmt: skip
    answer = kube.create(r.SERVICE_ACCOUNTS, body, namespace=namespace, name=name,
                         subresource="token")  # fmt: skip
    return str(answer["status"]["token"])


def flag_port(args: list[str], flag: str) -> int:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"--{flag}=")]
    return int(value.rsplit(":", 1)[1])


@dataclass
class Running:
    child: Child
    metrics_port: int
    health_port: int
    prefix: str

    def log(self) -> str:
        return tail(self.child.log_path, 60)


@dataclass(frozen=True)
class Setup:
    rel: Release
    kube: Client
    control_plane: ControlPlane
    namespace: str
    lease: str  # both controllers' Lease name, as the release's RBAC allows
    artifacts: Path
    reader: str
    stranger: str

    def start(self, name: str, metrics_flag: str, health_flag: str, prefix: str) -> Running:
        """The chart's container for `name`, as podrun starts it (its ServiceAccount's token)."""
        workload = component(self.rel.objects, name)
        container = pod_container(workload)
        env = container_env(container, PodFields(self.namespace, f"{name}-0", ""))
        sa = workload["spec"]["template"]["spec"]["serviceAccountName"]
        kubeconfig = self.control_plane.token_kubeconfig(sa, self.namespace)
        argv = [a for a in argv_of(container, env) if a != "--node-name="]
        argv += [f"--kubeconfig={kubeconfig}"]
        child = spawn(name, argv, self.artifacts / f"{name}.log",
                      env={"PATH": "/usr/bin:/bin", **env})  # fmt: skip
        return Running(child, flag_port(argv, metrics_flag), flag_port(argv, health_flag), prefix)


@pytest.fixture
def setup(
    *,
    control_plane: ControlPlane, kube: Client, crds: list[object], chart_helm: Helm,
    track: Tracker, unique_name: str, test_namespace: str, test_labels: dict[str, str],
    kube_version: str, test_artifacts: Path,
) -> Setup:  # fmt: skip
    lease = {"leaderElection": {"resourceName": unique_name}}
    values = {
        "nodeLifecycleController": lease,
        "nodeIpamController": {"enabled": True, "installCRDs": False, **lease},
        "metrics": {"reader": {"serviceAccount": {"name": READER}}},
    }
    version = kube_version if ipam_renders_at(kube_version) else IPAM_MINIMUM_KUBE_VERSION
    rel = render(chart_helm, release=unique_name, namespace=test_namespace, labels=test_labels,
                 kube_version=version, values=values)  # fmt: skip
    apply_identity(control_plane, track, rel)
    for sa in (READER, STRANGER):
        body: Obj = {"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": sa, "labels": test_labels}}  # fmt: skip
        kube.create(r.SERVICE_ACCOUNTS, body, namespace=test_namespace)
    reader = sa_token(kube, test_namespace, READER)
    stranger = sa_token(kube, test_namespace, STRANGER)
    return Setup(rel, kube, control_plane, test_namespace, unique_name, test_artifacts, reader,
                 stranger)  # fmt: skip


@pytest.fixture
def controllers(setup: Setup) -> Iterator[list[Running]]:
    started = [
        setup.start(LIFECYCLE, "metrics-bind-address", "health-probe-bind-address",
                    "local_ccm_lifecycle_"),
        setup.start(IPAM, "metrics-bind-address", "webserver-bind-address",
                    "local_ccm_ipam_"),
    ]  # fmt: skip
    try:
        yield started
    finally:
        for running in started:
            running.child.stop()


def wait_healthy(running: Running) -> None:
    def healthy() -> bool:
        if running.child.exited() is not None:
            raise AssertionError(f"exited {running.child.exited()}:\n{running.log()}")
        try:
            return get(running.health_port, "/healthz", tls=False)[0] == 200
        except OSError:
            return False

    eventually(healthy, timeout=30, interval=0.2, message=f"{running.child.name} /healthz")


def test_d16_chart_metrics_need_a_token_allowed_to_get_metrics(
    setup: Setup, controllers: list[Running]
) -> None:
    for running in controllers:
        wait_healthy(running)
        port = running.metrics_port
        assert get(port, "/metrics")[0] == 401, running.log()
        assert get(port, "/metrics", token="not-a-token")[0] == 401, running.log()
        status, body = get(port, "/metrics", token=setup.stranger)
        assert status == 403, (status, body, running.log())
        assert STRANGER in body

        def allowed(port: int = port) -> str | None:
            status, body = get(port, "/metrics", token=setup.reader)
            return body if status == 200 else None

        body = eventually(allowed, timeout=15, interval=0.2,
                          message=f"{running.child.name}: 200 for the metrics reader")  # fmt: skip
        assert running.prefix in body, body[:500]
        assert refused_plain(port)
        assert get(running.health_port, "/healthz", tls=False) == (200, "ok\n")
        assert get(running.health_port, "/metrics", tls=False)[0] == 404
    for running in controllers:
        log = running.log()
        assert "Traceback" not in log, log
        assert "cannot review" not in log, log


@pytest.mark.netns
def test_d16_without_metrics_flags_nothing_is_served_unauthenticated_off_loopback(
    setup: Setup, netns: NetnsFactory
) -> None:
    """Both binaries with only credentials and leader-election names: their default metrics
    addresses answer on a non-loopback address (a host link), but only HTTPS with a token."""
    address = str(netns.host_link(netns()).host_v4.ip)
    ns, lease = setup.namespace, setup.lease
    runs = []
    for name, extra, health in (
        (LIFECYCLE, ["--ping-count=0", f"--namespace={ns}", f"--leader-elect-id={lease}"], 8091),
        (IPAM, [f"--leader-elect-namespace={ns}", f"--leader-elect-resource-name={lease}"], 8081),
    ):
        workload = component(setup.rel.objects, name)
        sa = workload["spec"]["template"]["spec"]["serviceAccountName"]
        kubeconfig = setup.control_plane.token_kubeconfig(sa, ns)
        program = local_program(pod_container(workload)["command"][0])
        argv = [str(program), f"--kubeconfig={kubeconfig}", *extra]
        child = spawn(f"{name}-defaults", argv, setup.artifacts / f"{name}-defaults.log",
                      env={"PATH": "/usr/bin:/bin"})  # fmt: skip
        runs.append(Running(child, 8090 if name == LIFECYCLE else 8094, health, ""))
    try:
        for running in runs:
            wait_healthy(running)
            assert refused_plain(running.metrics_port, address), running.log()
            status, _ = get(running.metrics_port, "/metrics", host=address)
            assert status == 401, running.log()
            health_metrics = get(running.health_port, "/metrics", tls=False, host=address)
            assert health_metrics[0] == 404
    finally:
        for running in runs:
            running.child.stop()


def test_d16_notes_warn_when_podmonitors_would_scrape_without_a_token(chart_helm: Helm) -> None:
    monitored = {"metrics.enabled": "true", "metrics.podMonitor.enabled": "true"}
    warning = "every scrape answers 401"
    assert warning in chart_helm.notes(set_values=monitored).stdout
    with_token = {**monitored, "metrics.podMonitor.bearerTokenSecret.name": "prometheus-token"}
    assert warning not in chart_helm.notes(set_values=with_token).stdout
    plain = {**monitored, "nodeLifecycleController.metrics.secure": "false"}
    assert warning not in chart_helm.notes(set_values=plain).stdout


def test_d16_rbac_without_the_review_rules_still_starts_and_scrapes_answer_503(
    *,
    control_plane: ControlPlane, kube: Client, chart_helm: Helm, track: Tracker,
    unique_name: str, test_namespace: str, test_labels: dict[str, str], kube_version: str,
    test_artifacts: Path,
) -> None:  # fmt: skip
    """RBAC written before secure metrics (here: the chart's with metrics.secure=false) and a
    binary with the secure default, as an older manifest runs it: it starts, warns once, and
    a scrape with a valid token answers 503 without a traceback."""
    values = {"nodeLifecycleController": {"leaderElection": {"resourceName": unique_name},
                                          "metrics": {"secure": False}}}  # fmt: skip
    rel = render(chart_helm, release=unique_name, namespace=test_namespace, labels=test_labels,
                 kube_version=kube_version, values=values)  # fmt: skip
    apply_identity(control_plane, track, rel)
    workload = component(rel.objects, LIFECYCLE)
    sa = workload["spec"]["template"]["spec"]["serviceAccountName"]
    program = local_program(pod_container(workload)["command"][0])
    argv = [
        str(program),
        f"--kubeconfig={control_plane.token_kubeconfig(sa, test_namespace)}",
        "--ping-count=0",
        f"--namespace={test_namespace}",
        f"--leader-elect-id={unique_name}",
    ]
    child = spawn("nlc-old-rbac", argv, test_artifacts / "nlc-old-rbac.log",
                  env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    running = Running(child, 8090, 8091, "")
    try:
        wait_healthy(running)
        token = sa_token(kube, test_namespace, sa)
        status, body = get(running.metrics_port, "/metrics", token=token)
        assert status == 503, (status, body)
        log = running.log()
        assert "lacks create tokenreviews.authentication.k8s.io and create " in log, log
        assert "Traceback" not in log, log
    finally:
        child.stop()

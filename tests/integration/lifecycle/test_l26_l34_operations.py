"""L26, L27, L29-L32, L34: probe permissions at run time and at start-up (unprivileged, as
the chart runs the controller by default), unprobed mode, addresses, the out-of-service taint,
invalid flags and family selection."""

from __future__ import annotations

import http.client
import logging
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from local_ccm.kube.client import Client
from local_ccm.lifecycle.api import VOLUME_ATTACHMENTS
from local_ccm.netlink.netns import run_in_netns
from tests.integration.lifecycle.conftest import Setup
from tests.integration.lifecycle.test_l01_l10_scope_and_probes import (
    DELETED,
    controller,
    gone,
    kept,
    uid,
)
from tests.support import resources as r
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.lifecycle_harness import FAST, PROMETHEUS_PREFIX, eligible_node, reasons
from tests.support.netns import HostLink, Namespace
from tests.support.processes import Child, spawn
from tests.support.relay import LoopbackRelay
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns
BINARY = Path(sys.executable).parent / "node-lifecycle-controller"


def get_in_netns(netns: str, port: int, path: str) -> tuple[int, str]:
    """GET http://127.0.0.1:<port><path> from inside `netns`, where the controller listens."""
    sock = run_in_netns(netns, lambda: socket.create_connection(("127.0.0.1", port), timeout=5))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.sock = sock
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


def metric_in_netns(netns: str, port: int, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(get_in_netns(netns, port, "/metrics")[1]):
        for sample in family.samples:
            if sample.name == PROMETHEUS_PREFIX + name and sample.labels == labels:
                return float(sample.value)
    return 0.0


@pytest.mark.timeout(90)
def test_l26_a_probe_permission_error_at_run_time_is_unknown_not_a_crash(
    setup: Setup, link: HostLink, make_node: NodeFactory,
    control_plane: ControlPlane, test_artifacts: Path,
) -> None:  # fmt: skip
    ns = link.netns  # the controller's namespace: lo, and the veth to this test's /28
    ns.sysctl("net.ipv4.ping_group_range=0 0")  # this namespace only; gid 0 may ping
    metrics, health = 18090, 18091  # inside the test's own namespace: nothing else listens
    api_port = int(control_plane.api_url.rsplit(":", 1)[1])
    cmd = ["ip", "netns", "exec", ns.name, "setpriv", "--bounding-set=-net_raw",
           "--inh-caps=-net_raw", "--", str(BINARY), *FAST, f"--kubeconfig={setup.kubeconfig}",
           *setup.argv("--icmp-mode=datagram", "--probe-families=ipv4",
                       f"--node-selector={setup.selector}",
                       f"--metrics-bind-address=127.0.0.1:{metrics}", "--metrics-secure=false",
                       f"--health-probe-bind-address=127.0.0.1:{health}")]  # fmt: skip
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    with LoopbackRelay(ns.name, ("127.0.0.1", api_port)):
        child = spawn("l26", cmd, test_artifacts / "l26.log", env=env)
        try:
            eventually(lambda: get_in_netns(ns.name, health, "/readyz")[0] == 200, timeout=20,
                       message="the controller is ready")  # fmt: skip
            usable = {"kind": "icmp", "family": "ipv4"}
            assert metric_in_netns(ns.name, metrics, "probe_capability", **usable) == 1
            ns.sysctl("net.ipv4.ping_group_range=1 0")  # nobody may open ICMP datagram sockets
            node = eligible_node(make_node, str(link.unused_v4))
            eventually(lambda: "ProbeFailed" in reasons(setup.kube, uid(node)), timeout=DELETED,
                       message="ProbeFailed")  # fmt: skip
            errors = {**usable, "outcome": "error"}
            assert metric_in_netns(ns.name, metrics, "probes_total", **errors) >= 1
            kept(setup.kube, node, seconds=6)
            assert child.exited() is None, "the controller must keep running"
            assert metric_in_netns(ns.name, metrics, "verdicts_total", verdict="unknown") >= 1
        finally:
            child.stop()


UNPRIVILEGED = 65532  # the chart's uid and gid


@contextmanager
def unprivileged_controller(
    setup: Setup, ns: Namespace, control_plane: ControlPlane, log: Path, *argv: str
) -> Iterator[Child]:
    """The real binary inside `ns` as the chart runs it by default: uid/gid 65532, no
    capability in any set, the default --icmp-mode (auto); the API server through a loopback
    relay. Health on 127.0.0.1:18091, plain metrics on :18090, both inside `ns`."""
    api_port = int(control_plane.api_url.rsplit(":", 1)[1])
    readable = Path(tempfile.mkdtemp(prefix="l27-"))  # pytest's tmp_path is root's only
    try:
        readable.chmod(0o755)
        kubeconfig = readable / "kubeconfig"
        shutil.copyfile(setup.kubeconfig, kubeconfig)
        kubeconfig.chmod(0o644)
        cmd = ["ip", "netns", "exec", ns.name, "setpriv", f"--reuid={UNPRIVILEGED}",
               f"--regid={UNPRIVILEGED}", "--clear-groups", "--inh-caps=-all",
               "--bounding-set=-all", "--", str(BINARY), *FAST, f"--kubeconfig={kubeconfig}",
               *setup.argv("--probe-families=ipv4", f"--node-selector={setup.selector}",
                           "--metrics-bind-address=127.0.0.1:18090", "--metrics-secure=false",
                           "--health-probe-bind-address=127.0.0.1:18091", *argv)]  # fmt: skip
        with LoopbackRelay(ns.name, ("127.0.0.1", api_port)):
            child = spawn("l27", cmd, log, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
            try:
                yield child
            finally:
                child.stop()
    finally:
        shutil.rmtree(readable, ignore_errors=True)


@pytest.mark.timeout(90)
def test_l27_unprivileged_with_ping_group_range_deletes_the_dead_and_keeps_the_live(
    setup: Setup, link: HostLink, make_node: NodeFactory,
    control_plane: ControlPlane, test_artifacts: Path,
) -> None:  # fmt: skip
    """What the chart's Pod sysctl gives the controller: its gid in the namespace's range."""
    ns = link.netns
    ns.sysctl(f"net.ipv4.ping_group_range={UNPRIVILEGED} {UNPRIVILEGED}")
    dead = eligible_node(make_node, str(link.unused_v4))
    live = eligible_node(make_node, str(link.host_v4.ip))  # the veth's other end answers
    with unprivileged_controller(setup, ns, control_plane, test_artifacts / "l27.log") as child:
        eventually(lambda: get_in_netns(ns.name, 18091, "/readyz")[0] == 200, timeout=20,
                   message="the controller is ready")  # fmt: skip
        icmp4 = {"kind": "icmp", "family": "ipv4"}
        assert metric_in_netns(ns.name, 18090, "probe_capability", **icmp4) == 1
        eventually(lambda: gone(setup.kube, dead), timeout=DELETED, message="dead deleted")
        kept(setup.kube, live, seconds=4)
        assert "NodeReachable" in reasons(setup.kube, uid(live))
        assert child.exited() is None
    assert "probe icmp over ipv4 usable (datagram)" in child.log_path.read_text()


@pytest.mark.timeout(90)
def test_l27_no_usable_probe_at_start_up_is_not_ready_and_deletes_nothing(
    setup: Setup, link: HostLink, make_node: NodeFactory,
    control_plane: ControlPlane, test_artifacts: Path,
) -> None:  # fmt: skip
    """A range without the controller's gid (a host network whose range is the kernel's
    default, say): one clear line, /readyz failing with it, the gauge at 0, the process keeps
    running (beside node IPAM in the controller manager), and no Node is treated as dead."""
    ns = link.netns
    ns.sysctl("net.ipv4.ping_group_range=0 65531")  # every group but 65532 and above
    dead = eligible_node(make_node, str(link.unused_v4))
    with unprivileged_controller(setup, ns, control_plane, test_artifacts / "l27.log") as child:
        eventually(lambda: get_in_netns(ns.name, 18091, "/readyz")[0] == 503
                   and "node-cache" not in get_in_netns(ns.name, 18091, "/readyz")[1],
                   timeout=20, message="the Node cache synced, still not ready")  # fmt: skip
        code, body = get_in_netns(ns.name, 18091, "/readyz")
        assert code == 503
        assert "[-]probe failed: no configured probe is usable, so every verdict is unknown" \
            in body, body  # fmt: skip
        assert get_in_netns(ns.name, 18091, "/healthz")[0] == 200
        icmp4 = {"kind": "icmp", "family": "ipv4"}
        assert metric_in_netns(ns.name, 18090, "probe_capability", **icmp4) == 0
        eventually(lambda: "ProbeFailed" in reasons(setup.kube, uid(dead)), timeout=DELETED,
                   message="ProbeFailed")  # fmt: skip
        kept(setup.kube, dead, seconds=6)
        assert metric_in_netns(ns.name, 18090, "verdicts_total", verdict="unknown") >= 1
        assert metric_in_netns(ns.name, 18090, "verdicts_total", verdict="unreachable") == 0
        assert child.exited() is None, "the controller must keep running"
    lines = [x for x in child.log_path.read_text().splitlines() if "no configured probe" in x]
    assert len(lines) == 1, lines
    assert "ERROR" in lines[0]
    for remedy in (f"no group of this process ({UNPRIVILEGED}) is inside "
                   "net.ipv4.ping_group_range (0 65531)", "CAP_NET_RAW is missing"):  # fmt: skip
        assert remedy in lines[0]


def test_l29_unprobed_mode(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO)
    node = eligible_node(make_node, str(link.unused_v4))
    with controller(setup, "--ping-count=0") as c:
        eventually(lambda: gone(kube, node), timeout=DELETED, message="deleted")
        assert c.value("unprobed_mode") == 1
        probes = [c.value("probes_total", kind=k, family=f, outcome=o)
                  for k in ("icmp", "tcp") for f in ("ipv4", "ipv6")
                  for o in ("reply", "no_reply", "no_route", "error")]  # fmt: skip
        assert sum(probes) == 0
    assert any(r.levelno == logging.WARNING and "unprobed mode" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_l30_addresses(setup: Setup, make_node: NodeFactory, kube: Client) -> None:
    n1 = eligible_node(make_node, "n1.example.test", address_type="Hostname")
    n2 = eligible_node(make_node, "127.0.0.6", address_type="ExternalIP")
    with controller(setup, "--max-deletions-per-interval=2"):
        kept(kube, n1, n2, seconds=6)
        assert "NoProbeAddress" in reasons(kube, uid(n1))
        assert "NodeReachable" in reasons(kube, uid(n2))


def test_l31_out_of_service_taint(
    setup_oos: Setup, link: HostLink, make_node: NodeFactory, kube: Client, track: Tracker,
) -> None:  # fmt: skip
    setup = setup_oos
    node = eligible_node(make_node, str(link.unused_v4))
    name = node["metadata"]["name"]
    attachment = {
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": name, "labels": node["metadata"]["labels"]},
        "spec": {"attacher": "csi.test.local-ccm.io", "nodeName": name,
                 "source": {"persistentVolumeName": f"pv-{name}"}},
    }  # fmt: skip
    kube.create(VOLUME_ATTACHMENTS, attachment)
    track(VOLUME_ATTACHMENTS, name)

    def tainted() -> bool:
        current = kube.get(r.NODES, name)
        taints = current["spec"].get("taints") or []
        annotations = current["metadata"].get("annotations") or {}
        oos = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
               "effect": "NoExecute"}  # fmt: skip
        return oos in taints and "local-ccm.io/out-of-service-applied-at" in annotations

    with controller(setup, "--out-of-service-taint"):
        eventually(tainted, timeout=DELETED, message="out-of-service taint and annotation")
        kept(kube, node, seconds=4)
        kube.delete(VOLUME_ATTACHMENTS, name)
        removed = time.monotonic()
        eventually(lambda: gone(kube, node), timeout=5, interval=0.05, message="deleted")
        assert time.monotonic() - removed <= 2 * 1.0 + 1.0  # two intervals, plus request slack
    assert "OutOfServiceTaintAdded" in reasons(kube, uid(node))


def test_l32_invalid_flags() -> None:
    argv = ["--ping-count=-1", "--reconcile-interval=0", "--max-unhealthy=150%",
            "--probe=udp:1", "--bogus"]  # fmt: skip
    done = subprocess.run([str(BINARY), *argv], capture_output=True, text=True, timeout=30,
                          check=False, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if "--help" not in line]
    assert len(lines) == 6, done.stderr  # the five flags, and the credentials, in one list
    for flag in ("--ping-count", "--reconcile-interval", "--max-unhealthy", "--probe", "--bogus"):
        assert sum(flag in line for line in lines) == 1
    assert lines[-1].startswith("no Kubernetes credentials: ")


def test_l34_family_selection(
    setup: Setup, link: HostLink, make_node: NodeFactory, kube: Client
) -> None:
    node = eligible_node(make_node, str(link.unused_v6))
    with controller(setup, "--probe-families=ipv4"):
        kept(kube, node, seconds=6)
        assert "NoProbeAddress" in reasons(kube, uid(node))

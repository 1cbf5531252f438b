"""Scenarios judged by the apiserver's audit log (A15, A20, A25, A30), on a dedicated
audited plane whose apiserver these tests may stop and restart. The agent is the real binary
as uid 65532 with a pod-bound ServiceAccount token, the whole process in the namespace."""

from __future__ import annotations

import base64
import json
import secrets
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from local_ccm.kube.client import Client
from tests.support import resources as r
from tests.support.agent_harness import FAST
from tests.support.agent_process import (
    HEALTH_PORT,
    SERVICE_ACCOUNT,
    agent_for_node,
    copy_kubeconfig,
    create_agent_identity,
    private_dir,
    run_binary,
)
from tests.support.agent_scenarios import (
    A01_ADDRESSES,
    A01_ARGS,
    a01_network,
    hold,
    initialised,
    move_address,
    pairs,
    reasons,
)
from tests.support.audit import (
    audit_log,
    audited_plane,
    service_account_user,
    start_apiserver,
    stop_apiserver,
)
from tests.support.binaries import Binaries
from tests.support.chart import ShippedRbac
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.fixtures import FIELD_MANAGER
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns
WRITES = "local_ccm_agent_node_writes_total"


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
    with audited_plane(request.config, binaries) as started:
        yield started


@pytest.fixture
def plane_kube(plane: ControlPlane) -> Iterator[Client]:
    with Client.from_kubeconfig(plane.admin_kubeconfig, field_manager=FIELD_MANAGER) as c:
        yield c


@pytest.fixture
def plane_track(plane_kube: Client, request: pytest.FixtureRequest) -> Iterator[Tracker]:
    from tests.support.fixtures import run_state  # noqa: PLC0415

    tracker = Tracker(plane_kube, run_state(request.config).run_id)
    yield tracker
    tracker.cleanup()


@pytest.fixture
def plane_namespace(plane_kube: Client, unique_name: str, test_labels: dict[str, str]) -> str:
    body = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": unique_name, "labels": test_labels},
    }
    plane_kube.create(r.NAMESPACES, body)
    return unique_name  # the plane is thrown away with the module


@pytest.fixture
def plane_nodes(
    *,
    plane_kube: Client,
    plane_track: Tracker,
    test_labels: dict[str, str],
    request: pytest.FixtureRequest,
) -> NodeFactory:
    return NodeFactory(plane_kube, plane_track, test_labels, request.node.name)


class Scenario:
    """An initialised Node on the audited plane with the unprivileged agent running."""

    def __init__(
        self,
        *,
        plane: ControlPlane,
        kube: Client,
        track: Tracker,
        rbac: ShippedRbac,
        nodes: NodeFactory,
        netns: NetnsFactory,
        namespace: str,
        labels: dict[str, str],
        logs: Path,
        argv: list[str],
    ) -> None:
        self.plane, self.kube = plane, kube
        self.ns = a01_network(netns)
        self.name = nodes(uninitialized=True)["metadata"]["name"]
        self.user = service_account_user(namespace, SERVICE_ACCOUNT)
        self.audit = audit_log(plane)
        self.agent = agent_for_node(
            plane,
            kube,
            track,
            rbac=rbac,
            namespace=namespace,
            node=self.name,
            netns=self.ns.name,
            argv=[*A01_ARGS, *argv],
            log_path=logs / "agent.log",
            labels=labels,
        )

    def start(self) -> None:
        self.agent.start()
        eventually(lambda: initialised(self.kube, self.name), timeout=10, message="initialised")
        self.agent.wait_ready()
        wanted = {"AddressesUpdated", "NodeInitialized"}
        eventually(lambda: wanted <= reasons(self.kube, self.name), timeout=10)

    def agent_requests(self, since: datetime, until: datetime | None = None) -> list[str]:
        return [str(e) for e in self.audit.requests(user=self.user, since=since, until=until)]


@pytest.fixture
def scenario(
    *,
    shipped_agent_rbac: ShippedRbac,
    plane: ControlPlane,
    plane_kube: Client,
    plane_track: Tracker,
    plane_nodes: NodeFactory,
    netns: NetnsFactory,
    plane_namespace: str,
    test_labels: dict[str, str],
    test_artifacts: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Scenario]:
    argv = list(getattr(request, "param", FAST))
    made = Scenario(
        plane=plane,
        kube=plane_kube,
        track=plane_track,
        rbac=shipped_agent_rbac,
        nodes=plane_nodes,
        netns=netns,
        namespace=plane_namespace,
        labels=test_labels,
        logs=test_artifacts,
        argv=argv,
    )
    try:
        yield made
    finally:
        made.agent.stop()


def now() -> datetime:
    return datetime.now(UTC)


# ------------------------------------------------------------------ A15
@pytest.mark.timeout(150)  # the scenario itself watches 60 s of silence
@pytest.mark.parametrize(
    "scenario",
    [("--reconcile-interval=1s", "--settle-time=1s", "--resync-interval=10m", "--v=2")],
    indirect=True,
)
def test_a15_steady_state_is_silent(*, scenario: Scenario) -> None:
    scenario.start()
    agent = scenario.agent
    eventually(
        lambda: any(e.verb == "watch" for e in scenario.audit.requests(user=scenario.user)),
        timeout=10,
        message="the agent's WATCH",
    )
    noop = agent.metric_sum("local_ccm_agent_passes_total", outcome="noop")
    log_size = agent.log_path.stat().st_size
    since = now()
    hold(60, lambda: agent.exited() is None, interval=1.0, what="agent running")
    requests = scenario.audit.requests(user=scenario.user, since=since)
    assert [str(e) for e in requests if e.verb != "watch"] == []
    assert agent.metric_sum("local_ccm_agent_passes_total", outcome="noop") > noop
    assert agent.log()[log_size:] == "", "the log at --v=2 is not silent in steady state"


# ------------------------------------------------------------------ A20
@pytest.mark.timeout(180)  # 20 s outage, an apiserver restart on 2 busy cores, 30 s reconnect
def test_a20_agent_survives_an_apiserver_restart(*, scenario: Scenario) -> None:
    scenario.start()
    agent, ns = scenario.agent, scenario.ns
    stop_apiserver(scenario.plane)
    move_address(ns, "eth0", "198.51.100.10/24", "198.51.100.20/24", "198.51.100.1")
    hold(20, lambda: agent.http_get(HEALTH_PORT, "/healthz").status == 200, what="/healthz 200")
    spawned = now()
    start_apiserver(scenario.plane)
    back = now()

    def reconnected() -> bool:
        return bool(scenario.audit.requests(user=scenario.user, since=spawned))

    eventually(reconnected, timeout=30, interval=0.5, message="the agent reconnected")
    assert agent.exited() is None
    expected = [("InternalIP", "192.0.2.10"), ("ExternalIP", "198.51.100.20")]
    eventually(
        lambda: pairs(scenario.kube.get(r.NODES, scenario.name)) == expected,
        timeout=30,
        message="the new address is written",
    )
    burst = scenario.agent_requests(spawned, back + timedelta(seconds=5))
    assert len(burst) <= 10, burst
    assert agent.http_get(HEALTH_PORT, "/healthz").status == 200


# ------------------------------------------------------------------ A25
def test_a25_invalid_command_line_exits_2_before_any_request(
    *,
    shipped_agent_rbac: ShippedRbac,
    plane: ControlPlane,
    plane_kube: Client,
    plane_track: Tracker,
    plane_nodes: NodeFactory,
    netns: NetnsFactory,
    plane_namespace: str,
    test_labels: dict[str, str],
    test_artifacts: Path,
) -> None:
    ns = netns.uplink(v4=("198.51.100.10/24", "198.51.100.1/24"), v6=None)
    node = plane_nodes(uninitialized=True)["metadata"]["name"]
    identity = create_agent_identity(
        plane_kube,
        plane_track,
        rbac=shipped_agent_rbac,
        name=f"lccm-{node}"[:60],
        namespace=plane_namespace,
        node=node,
        labels=test_labels,
    )
    source = plane.token_kubeconfig(SERVICE_ACCOUNT, plane_namespace, bound_pod=identity.pod)
    since = now()
    argv = [
        "--internal-ip-target=10.0.0.300",
        "--reconcile-interval=10",
        "--external-ip-cidrs=10.0.0.1/8",
        "--bogus",
    ]
    done = run_binary(
        ns.node.name,
        argv,
        log_path=test_artifacts / "agent.log",
        kubeconfig=copy_kubeconfig(private_dir(test_artifacts), source),
        api_url=plane.api_url,
    )
    assert done.code == 2, done
    lines = done.stderr.splitlines()
    problems = [line for line in lines if "local-ccm --help" not in line]
    assert len(problems) == 5, lines
    for flag in (
        "--internal-ip-target",
        "--reconcile-interval",
        "--external-ip-cidrs",
        "--bogus",
        "--node-name",
    ):
        assert sum(flag in line for line in problems) == 1, (flag, problems)
    assert "run 'local-ccm --help' for usage" in lines[-1], lines
    # The audit log is written synchronously; a marker request bounds what we read.
    plane_kube.get(r.NAMESPACES, plane_namespace)
    user = service_account_user(plane_namespace, SERVICE_ACCOUNT)
    assert audit_log(plane).requests(user=user, since=since) == []


# ------------------------------------------------------------------ A30
def etcd_call(plane: ControlPlane, path: str, body: dict[str, object]) -> dict[str, object]:
    """etcd's v3 JSON gateway on loopback."""
    req = urllib.request.Request(
        f"{plane.etcd_url}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        result: dict[str, object] = json.loads(resp.read())
    return result


def compact_etcd(plane: ControlPlane) -> int:
    """Compact etcd at its current revision; returns the revision."""
    key = base64.b64encode(b"/registry/namespaces/default").decode()
    header = etcd_call(plane, "/v3/kv/range", {"key": key})["header"]
    revision = int(header["revision"])  # type: ignore[index]
    etcd_call(plane, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


@pytest.mark.timeout(150)  # an apiserver restart on 2 busy cores
def test_a30_watch_expiry_relists_once_without_writing(*, scenario: Scenario) -> None:
    scenario.start()
    agent, kube = scenario.agent, scenario.kube
    writes = agent.metric_sum(WRITES)
    marker = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"a30-{secrets.token_hex(3)}", "namespace": "default"},
    }
    kube.create(r.CONFIG_MAPS, marker, namespace="default")  # moves etcd past the agent's RV
    compact_etcd(scenario.plane)
    stop_apiserver(scenario.plane)  # forces the reconnect; the new watch cache starts later
    restarted = now()
    start_apiserver(scenario.plane)
    eventually(
        lambda: agent.metric("local_ccm_agent_watch_restarts_total", {"reason": "gone"}) >= 1,
        timeout=30,
        message="watch_restarts_total{reason=gone}",
    )
    eventually(
        lambda: any(
            e.verb == "watch" for e in scenario.audit.requests(user=scenario.user, since=restarted)
        ),
        timeout=30,
        message="the watch is re-established",
    )
    quiet_from = now()
    hold(10, lambda: agent.metric_sum(WRITES) == writes, interval=1.0, what="no write")
    after = scenario.audit.requests(user=scenario.user, since=restarted)
    lists = [str(e) for e in after if e.verb == "list"]
    assert len(lists) == 1, [str(e) for e in after]
    assert [str(e) for e in after if e.verb == "patch"] == []
    assert pairs(kube.get(r.NODES, scenario.name)) == A01_ADDRESSES
    assert [e for e in scenario.agent_requests(quiet_from) if " watch " not in e] == []

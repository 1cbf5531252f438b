"""CM01–CM03: `local-ccm-controller-manager` on a real apiserver (a dedicated, audited plane).

CM01: with node-lifecycle and node-ipam it holds one Node watch and one Lease, asks for its
permissions in a handful of requests, assigns pod CIDRs to a new Node from a ClusterCIDR and
deletes a NotReady Node whose addresses do not answer (addresses inside the test's own network
namespace: probes never leave the machine); its start-up line names only the servers it runs.
CM02: `--controllers=node-ipam` runs IPAM alone.
CM03: SIGTERM exits 0 and releases the Lease. CM05: while the Lease of the standalone
node-ipam-controller is held (an old Pod still leading while a switch to the manager rolls out),
the manager's node IPAM assigns nothing; once it is released, it does, never writing that Lease.
CM04: the lifecycle controller sees, through the
shared Node watch, only the Nodes of its `--node-selector`, as the standalone binary's own watch
does: a Node outside it that goes NotReady starts no episode.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.ipam.objects import cluster_cidr, pod_cidrs
from tests.integration.lifecycle.test_l01_l10_scope_and_probes import DELETED, gone, kept
from tests.support import crds
from tests.support import resources as r
from tests.support.audit import audited_plane
from tests.support.binaries import Binaries
from tests.support.controlplane import ControlPlane
from tests.support.fixtures import run_state
from tests.support.leases import HeldLease
from tests.support.lifecycle_harness import FAST, SA, eligible_node, scrape
from tests.support.lifecycle_plane import PlaneSetup, plane_setup
from tests.support.netns import HostLink, NetnsFactory
from tests.support.processes import Child, free_port, spawn, tail
from tests.support.waiting import eventually

pytestmark = pytest.mark.netns
BINARY = Path(sys.executable).parent / "local-ccm-controller-manager"
IPAM_GROUP = "networking.x-k8s.io"
ASSIGNED = 15.0
STANDALONE = ("node-lifecycle-controller", "node-ipam-controller")  # the manager's defaults


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[ControlPlane]:
    with audited_plane(request.config, binaries) as started:
        yield started


@pytest.fixture
def link(netns: NetnsFactory) -> HostLink:
    """A host-side /28: <base+5> and up are silent targets, nothing leaves the machine."""
    return netns.host_link(netns())


@pytest.fixture
def world(plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[PlaneSetup]:
    """The lifecycle controller's shipped RBAC in a fresh namespace, plus IPAM's rules for the
    same ServiceAccount (what the chart's combined mode binds), and the ClusterCIDR CRD."""
    with plane_setup(plane, run_state(request.config).run_id, request.node.nodeid) as setup:
        crds.install(setup.kube)
        _grant_ipam(setup)
        yield setup


def _grant_ipam(world: PlaneSetup) -> None:
    name = f"{world.namespace}-ipam"
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [IPAM_GROUP], "resources": ["clustercidrs"],
         "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [IPAM_GROUP], "resources": ["clustercidrs/status"], "verbs": ["patch"]},
    ]  # fmt: skip
    world.kube.create(r.CLUSTER_ROLES, {"apiVersion": "rbac.authorization.k8s.io/v1",
                                         "kind": "ClusterRole", "metadata": {"name": name},
                                         "rules": rules})  # fmt: skip
    world.track(r.CLUSTER_ROLES, name)
    world.kube.create(r.CLUSTER_ROLE_BINDINGS, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": world.namespace}],
    })  # fmt: skip
    world.track(r.CLUSTER_ROLE_BINDINGS, name)


def _pool(world: PlaneSetup, ipv4: str) -> None:
    name = f"{world.namespace}-pool"[:63]
    world.kube.create(r.CLUSTER_CIDRS, cluster_cidr(name, {}, bits=8, ipv4=ipv4))
    world.track(r.CLUSTER_CIDRS, name)


def _start(world: PlaneSetup, test_artifacts: Path, *extra: str) -> Child:
    argv = [str(BINARY), *FAST, f"--kubeconfig={world.kubeconfig}", *world.argv(),
            f"--node-selector={world.selector}", *extra]  # fmt: skip
    return spawn("manager", argv, test_artifacts / "manager.log", env={"PATH": "/usr/bin:/bin"})


def _holder(world: PlaneSetup) -> str:
    lease: dict[str, Any] = world.kube.get(r.LEASES, world.lease, namespace=world.namespace)
    return str(lease["spec"].get("holderIdentity") or "")


def _requests(world: PlaneSetup, resource: str) -> list[Any]:
    from tests.support.audit import audit_log  # noqa: PLC0415

    return [e for e in audit_log(world.plane).requests(user=world.user) if e.resource == resource]


@pytest.mark.timeout(120)
def test_cm01_one_process_one_lease_both_jobs(
    world: PlaneSetup,
    link: HostLink,
    test_artifacts: Path,
) -> None:
    _pool(world, "10.77.0.0/16")
    child = _start(world, test_artifacts)
    try:
        eventually(lambda: bool(_holder(world)), timeout=20, message="the Lease is held")
        fresh = world.make_node(ready="True")
        eligible = eligible_node(world.make_node, str(link.unused_v4))
        name = fresh["metadata"]["name"]
        eventually(lambda: bool(pod_cidrs(world.kube, name)), timeout=ASSIGNED,
                   message="IPAM assigns a pod CIDR")  # fmt: skip
        assert pod_cidrs(world.kube, name)[0].startswith("10.77.")
        eventually(lambda: gone(world.kube, eligible), timeout=DELETED + 10,
                   message="the lifecycle controller deletes the unreachable Node")  # fmt: skip
        assert child.exited() is None, tail(child.log_path)
    finally:
        child.stop(grace=5)
    watches = [str(e) for e in _requests(world, "nodes") if e.verb == "watch"]
    assert len(watches) == 1, watches  # one Node informer for both controllers
    leases = {e.name for e in _requests(world, "leases") if e.name and e.verb != "get"}
    assert leases == {world.lease}, leases  # the one Lease it holds
    read = {e.name for e in _requests(world, "leases") if e.name and e.verb == "get"}
    assert read == {world.lease, *STANDALONE}, read  # and the standalone ones it waits for
    reviews = _requests(world, "selfsubjectrulesreviews") + _requests(
        world, "selfsubjectaccessreviews"
    )
    assert 1 <= len(reviews) <= 3, [str(e) for e in reviews]  # the union, asked once
    assert "Traceback" not in tail(child.log_path, 400)
    (start,) = [
        x for x in tail(child.log_path, 400).splitlines() if "INFO local_ccm.cli start" in x
    ]
    assert " health=off" in start  # the servers it runs (FAST turns both off) and nothing else:
    assert " web=" not in start  # IPAM's own web server is not started in the manager


@pytest.mark.timeout(120)
def test_cm02_controllers_node_ipam_runs_ipam_only(
    world: PlaneSetup,
    link: HostLink,
    test_artifacts: Path,
) -> None:
    _pool(world, "10.78.0.0/16")
    child = _start(world, test_artifacts, "--controllers=node-ipam")
    try:
        eligible = eligible_node(world.make_node, str(link.unused_v4))
        name = eligible["metadata"]["name"]
        eventually(lambda: bool(pod_cidrs(world.kube, name)), timeout=ASSIGNED,
                   message="IPAM assigns a pod CIDR")  # fmt: skip
        kept(world.kube, eligible, seconds=DELETED)  # no lifecycle controller: nothing deleted
        assert child.exited() is None, tail(child.log_path)
    finally:
        child.stop(grace=5)
    assert "controllers=node-ipam" in tail(child.log_path, 400)


@pytest.mark.timeout(90)
def test_cm03_sigterm_exits_0_and_releases_the_lease(
    world: PlaneSetup, test_artifacts: Path
) -> None:
    child = _start(world, test_artifacts)
    try:
        eventually(lambda: bool(_holder(world)), timeout=20, message="the Lease is held")
        child.proc.send_signal(signal.SIGTERM)
        assert child.proc.wait(timeout=10) == 0, tail(child.log_path)
    finally:
        child.stop(grace=5)
    assert _holder(world) == ""


MANAGED = "example.com/managed"


@pytest.mark.timeout(90)
def test_cm04_a_node_outside_the_selector_starts_no_episode(
    world: PlaneSetup, test_artifacts: Path
) -> None:
    """Two controllers, so the Node watch is the shared one; the selector narrows this test's
    Nodes further. The Node inside is the control: once its episode is logged, the controller
    has evaluated both."""
    selector = f"{world.selector},{MANAGED}=yes"
    child = _start(world, test_artifacts, f"--node-selector={selector}")
    try:
        eventually(lambda: bool(_holder(world)), timeout=20, message="the Lease is held")
        outside = world.make_node(ready="Unknown")["metadata"]["name"]
        inside = world.make_node(ready="Unknown", labels={MANAGED: "yes"})["metadata"]["name"]
        eventually(lambda: _episode_logged(child, inside), timeout=20,
                   message="the Node inside the selector starts an episode")  # fmt: skip
        assert not _episode_logged(child, outside), tail(child.log_path, 400)
        assert child.exited() is None, tail(child.log_path)
    finally:
        child.stop(grace=5)
    assert "controllers=node-lifecycle,node-ipam" in tail(child.log_path, 400)


def _episode_logged(child: Child, node: str) -> bool:
    lines = tail(child.log_path, 2000).splitlines()
    return any("episode started" in line and f"node={node} " in line for line in lines)


@pytest.mark.timeout(120)
def test_cm05_node_ipam_waits_for_the_standalone_lease_while_it_is_held(
    world: PlaneSetup, test_artifacts: Path
) -> None:
    _pool(world, "10.79.0.0/16")
    old = HeldLease(world.kube, world.namespace, "node-ipam-controller",
                    "old-node-ipam-controller_0001")  # fmt: skip
    port = free_port()
    metrics = (f"--metrics-bind-address=127.0.0.1:{port}", "--metrics-secure=false")
    child = _start(world, test_artifacts, "--controllers=node-lifecycle,node-ipam", *metrics)

    def waiting() -> dict[str, float]:  # controller -> local_ccm_waiting_for_lease
        found = scrape(port).items()
        return {dict(labels)["controller"]: value for (metric, labels), value in found
                if metric == "local_ccm_waiting_for_lease"}  # fmt: skip

    try:
        eventually(lambda: bool(_holder(world)), timeout=20, message="the manager's Lease is held")
        name = world.make_node(ready="True")["metadata"]["name"]
        eventually(lambda: "waiting for the lease" in tail(child.log_path, 400), timeout=10,
                   message="the manager says it waits")  # fmt: skip
        time.sleep(5)  # five of the old leader's renewals: the manager's IPAM assigns nothing
        assert pod_cidrs(world.kube, name) == [], "two allocators side by side"
        # what an alert sees: IPAM held back; the lifecycle controller's Lease is free, it runs
        assert waiting() == {"node-ipam": 1, "node-lifecycle": 0}
        old.release()
        eventually(
            lambda: bool(pod_cidrs(world.kube, name)),
            timeout=ASSIGNED,
            message="IPAM assigns a pod CIDR once the old leader released its Lease",
        )
        assert waiting() == {"node-ipam": 0, "node-lifecycle": 0}
        assert child.exited() is None, tail(child.log_path)
    finally:
        old.stopped.set()
        child.stop(grace=5)
    assert old.spec()["holderIdentity"] == ""  # only read, never taken
    writes = [e for e in _requests(world, "leases") if e.name == "node-ipam-controller"
              and e.verb != "get"]  # fmt: skip
    assert writes == [], [str(e) for e in writes]

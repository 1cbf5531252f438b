"""E06: the node-lifecycle-controller, installed by the packaged chart as a Deployment (the
chart's default: standalone, not in the controller manager) with short timeouts, deletes a real
Node whose machine died: its kubelet and containerd stopped for good, its namespaces gone.

Two real nodes on one plane. The controller is pinned to the survivor (``nodeSelector``), so
it outlives the victim; it runs on the survivor's host network, where it probes. The victim's
eth0 has another address of the same /25 (192.0.2.20), behind a gateway namespace of its own:
from the survivor, ARP for it is never answered, so every probe ends without a reply and the
verdict is ``unreachable``. Every address involved is inside the test's namespaces.

kube-controller-manager runs with ``--node-monitor-grace-period=20s`` (default 50 s) so the
victim goes Unknown sooner; nothing else about the plane differs from E01's.
"""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Interface
from pathlib import Path
from typing import Any

import pytest

from local_ccm.names import UNINITIALIZED_TAINT
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.lifecycle_harness import exists
from tests.support.realnode import RealNode, is_ready
from tests.support.realnode_chart import NAMESPACE, install_packaged
from tests.support.realnode_cluster import Cluster, another_node, realnode_cluster
from tests.support.waiting import eventually

VICTIM_V4 = IPv4Interface("192.0.2.20/25")
GRACE = "--node-monitor-grace-period=20s"
INIT_TIMEOUT = 180.0
# Grace (20 s) + not-ready timeout (5 s) + a probe and a reconcile interval, on a loaded machine.
DELETE_TIMEOUT = 180.0
EVENT_TIMEOUT = 30.0
LIFECYCLE = "app.kubernetes.io/component=node-lifecycle-controller"


def lifecycle_values(survivor: str) -> dict[str, Any]:
    """One replica on the survivor, every Node in scope (no autoscaler taint needed), short
    timeouts; ICMP probes over IPv4 from the host network with raw sockets as root with
    NET_RAW (the chart's opt-in; its default, datagram sockets as 65532 in the Pod's own
    network, is E04's and L27's)."""
    return {
        "enabled": True,
        "replicaCount": 1,
        "hostNetwork": True,
        "nodeSelector": {"kubernetes.io/hostname": survivor},
        "controller": {
            "watchAutoscalerTaint": False,
            "notReadyTimeout": "5s",
            "reconcileInterval": "2s",
            "pingCount": 1,
            "pingTimeout": "2s",
            "probeFamilies": "ipv4",
            "icmpMode": "raw",
        },
    }


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[Cluster]:
    with realnode_cluster(request.config, binaries, kcm_extra=(GRACE,)) as started:
        yield started


@pytest.fixture(scope="module")
def victim(
    request: pytest.FixtureRequest, cluster: Cluster, binaries: Binaries
) -> Iterator[RealNode]:
    with another_node(cluster, request.config, binaries, v4=VICTIM_V4) as node:
        yield node


@pytest.fixture(scope="module")
def installed(
    cluster: Cluster, victim: RealNode, binaries: Binaries, tmp_path_factory: pytest.TempPathFactory
) -> float:
    values = {"nodeLifecycleController": lifecycle_values(cluster.node.spec.name)}
    return install_packaged(cluster, binaries.path("helm"), tmp_path_factory, values)


def initialised(cluster: Cluster, name: str) -> dict[str, Any] | None:
    node = cluster.kube.get(r.NODES, name)
    taints = [t["key"] for t in node["spec"].get("taints", [])]
    return None if UNINITIALIZED_TAINT in taints else node


def wait_initialised(cluster: Cluster, name: str) -> dict[str, Any]:
    return eventually(lambda: initialised(cluster, name), timeout=INIT_TIMEOUT,
                      message=f"{name} initialised")  # fmt: skip


def internal_ips(node: dict[str, Any]) -> list[str]:
    return [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]


def controller_log(cluster: Cluster) -> str:
    """The lifecycle controller's container log, from the survivor's pod log directory."""
    logs = sorted((cluster.node.spec.logs / "pods").glob(f"{NAMESPACE}_*lifecycle*/*/*.log"))
    return "".join(Path(p).read_text(errors="replace") for p in logs)


def test_e06_both_nodes_initialised_and_the_controller_runs_on_the_survivor(
    cluster: Cluster, victim: RealNode, installed: float
) -> None:
    for node in (cluster.node, victim):
        assert internal_ips(wait_initialised(cluster, node.spec.name)) == [node.address]
    assert victim.address == str(VICTIM_V4.ip) != cluster.node.address
    (pod,) = cluster.kube.list(r.PODS, namespace=NAMESPACE, label_selector=LIFECYCLE)["items"]
    assert pod["spec"]["nodeName"] == cluster.node.spec.name
    assert pod["spec"]["hostNetwork"] is True


def test_e06_a_dead_node_goes_unreachable_and_is_deleted(
    cluster: Cluster, victim: RealNode, installed: float
) -> None:
    name, survivor = victim.spec.name, cluster.node.spec.name
    uid = cluster.kube.get(r.NODES, name)["metadata"]["uid"]
    assert victim.stop() == []  # kubelet, containerd, pods, namespaces: the machine is gone
    try:
        eventually(
            lambda: not exists(cluster.kube, name),
            timeout=DELETE_TIMEOUT,
            message=f"{name} deleted",
        )
    except AssertionError as exc:
        log = controller_log(cluster)[-4000:]
        raise AssertionError(f"{exc}\n--- controller log\n{log}") from exc

    # The controller's Events go out through its outbox, beside the DELETE: the last one may
    # land just after the Node is gone.
    def reasons() -> tuple[list[Any], dict[str, str]] | None:
        found = cluster.kube.list(r.EVENTS, field_selector=f"involvedObject.uid={uid}")["items"]
        by = {e["reason"]: e["message"] for e in found}
        return (found, by) if {"CheckingReachability", "DeletingNode"} <= by.keys() else None

    events, by_reason = eventually(reasons, timeout=EVENT_TIMEOUT, message="the Node's Events")
    assert f"probing {victim.address} with icmp" in by_reason["CheckingReachability"], events
    deleting = by_reason["DeletingNode"]
    assert f"deleting Node {name} (uid {uid}): NotReady since" in deleting, deleting
    assert f"probes: icmp {victim.address}: no_reply" in deleting, deleting
    assert "NodeReachable" not in by_reason, events
    assert f"deleted Node: deleting Node {name}" in controller_log(cluster)
    assert is_ready(cluster.kube.get(r.NODES, survivor))  # the survivor is untouched

"""E04: node IPAM on a real node that has no pod network yet. The kubelet starts with an empty
CNI conf_dir, so it reports NetworkReady=false and runs only hostNetwork Pods. The packaged
chart is installed with local-ccm-controller-manager hosting node IPAM (and the lifecycle
controller in its unprivileged form, ``hostNetwork: false`` with ICMP datagram sockets, whose
network the manager used to take): the manager must start on the host network, assign the
Node ``podCIDRs`` from a ClusterCIDR, and only then does the node's CNI network appear, written
from that range the way flannel and kube-router write theirs (host-local needs a literal
subnet). A plain Pod created before all of it then gets its IP inside the Node's range.

With the manager off the host network the install never completes: its Pod waits in
ContainerCreating for the pod network that waits for its ranges.
"""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Network, ip_address, ip_network
from typing import Any

import pytest

from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.netns import Namespace
from tests.support.realnode import is_ready
from tests.support.realnode_chart import install_chart, manager_pod, node_values, package_chart
from tests.support.realnode_cluster import Cluster, realnode_cluster
from tests.support.waiting import eventually

TIMEOUT = 180.0
POOL = IPv4Network("192.0.2.128/25")  # docs/testing.md: a real node's Pods
PER_NODE_HOST_BITS = 4  # a /28 per Node
EARLY_POD = "e04-early"
VALUES = {
    "controllerManager": {"enabled": True},
    "nodeIpamController": {"enabled": True},
    "nodeLifecycleController": {
        "enabled": True, "replicaCount": 1, "hostNetwork": False,
        "controller": {"icmpMode": "datagram", "probeFamilies": "ipv4"},
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[Cluster]:
    with realnode_cluster(request.config, binaries, cni=False) as started:
        yield started


@pytest.fixture(scope="module")
def early_pod(cluster: Cluster) -> str:
    """A Pod of the pause image on the pod network, created while the node has none; it
    tolerates the node's taints (not-ready, uninitialized), so it is bound at once."""
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": EARLY_POD, "namespace": "default"},
        "spec": {
            "containers": [{"name": "pause", "image": cluster.node.spec.pause.name,
                            "imagePullPolicy": "Never"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }  # fmt: skip
    cluster.kube.create(r.PODS, pod, namespace="default")
    eventually(lambda: get_pod(cluster, EARLY_POD)["spec"].get("nodeName"), timeout=TIMEOUT,
               message="early Pod bound")  # fmt: skip
    return EARLY_POD


@pytest.fixture(scope="module")
def installed(
    cluster: Cluster,
    early_pod: str,
    binaries: Binaries,
    tmp_path_factory: pytest.TempPathFactory,
) -> float:
    """The packaged chart, installed with ``helm install --wait`` while the node has no pod
    network. The node's own ping_group_range admits gid 65532, as the chart's NOTES ask of a
    host where the datagram-ICMP lifecycle controller runs on the host network."""
    Namespace(cluster.node.names.node_ns).sysctl("net.ipv4.ping_group_range=0 2147483647")
    chart = package_chart(tmp_path_factory.mktemp("chart"), binaries.path("helm"))
    try:
        return install_chart(cluster, binaries.path("helm"), chart,
                             {**node_values(cluster), **VALUES})  # fmt: skip
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n--- pods\n{pod_states(cluster)}") from None


@pytest.fixture(scope="module")
def assigned(cluster: Cluster, installed: float) -> list[str]:
    """The Node's ``spec.podCIDRs`` once the manager has assigned them from a ClusterCIDR
    (the chart installed its CRD)."""
    body = {
        "apiVersion": r.CLUSTER_CIDRS.api_version, "kind": r.CLUSTER_CIDRS.kind,
        "metadata": {"name": "e04"},
        "spec": {"perNodeHostBits": PER_NODE_HOST_BITS, "ipv4": str(POOL)},
    }  # fmt: skip
    cluster.kube.create(r.CLUSTER_CIDRS, body)
    cidrs = eventually(lambda: pod_cidrs(cluster), timeout=TIMEOUT,
                       message=f"podCIDRs assigned\n{pod_states(cluster)}")  # fmt: skip
    return list(cidrs)


@pytest.fixture(scope="module")
def pod_network(cluster: Cluster, assigned: list[str]) -> IPv4Network:
    """The node's CNI network, written from its Node's range once it is known."""
    subnet = IPv4Network(assigned[0])
    cluster.node.write_cni(subnet)
    return subnet


def get_pod(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.kube.get(r.PODS, name, namespace="default")


def pod_cidrs(cluster: Cluster) -> list[str]:
    return list(cluster.kube.get(r.NODES, cluster.node.spec.name)["spec"].get("podCIDRs", []))


def waiting_reason(pod: dict[str, Any]) -> str | None:
    (status,) = pod["status"].get("containerStatuses") or [{}]
    reason = status.get("state", {}).get("waiting", {}).get("reason")
    return None if reason is None else str(reason)


def pod_states(cluster: Cluster) -> str:
    """One line per Pod of the cluster: name, phase, waiting reason, host network."""
    lines = []
    for pod in cluster.kube.list(r.PODS)["items"]:
        lines.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}: "
                     f"{pod['status'].get('phase')} {waiting_reason(pod)} "
                     f"hostNetwork={pod['spec'].get('hostNetwork', False)}")  # fmt: skip
    return "\n".join(lines)


def network_not_ready(node: dict[str, Any]) -> str:
    (ready,) = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "False", ready
    return str(ready["message"])


def test_e04_the_node_starts_with_no_pod_network(cluster: Cluster) -> None:
    node = cluster.registered
    assert "NetworkReady=false" in network_not_ready(node)
    assert node["spec"].get("podCIDRs") is None


def test_e04_the_manager_starts_on_the_host_network_before_any_pod_network(
    cluster: Cluster, early_pod: str, installed: float
) -> None:
    pod = manager_pod(cluster)
    assert pod["spec"]["nodeName"] == cluster.node.spec.name
    assert pod["spec"]["hostNetwork"] is True
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["ready"] is True
    container = pod["spec"]["containers"][0]
    assert "--controllers=node-lifecycle,node-ipam" in container["args"]
    # Meanwhile a Pod on the pod network cannot start: the node still has no CNI network.
    early = get_pod(cluster, early_pod)
    assert early["status"]["phase"] == "Pending"
    assert waiting_reason(early) == "ContainerCreating"
    assert "podIP" not in early["status"]
    node = cluster.kube.get(r.NODES, cluster.node.spec.name)
    assert "NetworkReady=false" in network_not_ready(node)


def test_e04_the_node_gets_pod_cidrs_from_the_cluster_cidr(
    cluster: Cluster, assigned: list[str]
) -> None:
    (cidr,) = assigned  # the ClusterCIDR has IPv4 only
    block = ip_network(cidr)
    assert block.subnet_of(POOL)  # type: ignore[arg-type]
    assert block.prefixlen == POOL.max_prefixlen - PER_NODE_HOST_BITS
    node = cluster.kube.get(r.NODES, cluster.node.spec.name)
    assert node["spec"]["podCIDR"] == cidr


def test_e04_a_pod_on_the_pod_network_gets_its_ip_from_the_node_s_range(
    cluster: Cluster, early_pod: str, pod_network: IPv4Network
) -> None:
    def running() -> dict[str, Any] | None:
        pod = get_pod(cluster, early_pod)
        return pod if pod["status"].get("phase") == "Running" else None

    states = f"{pod_states(cluster)}\n{cluster.node.tails()}"
    pod = eventually(running, timeout=TIMEOUT, message=f"early Pod Running\n{states}")
    assert ip_address(pod["status"]["podIP"]) in pod_network
    assert pod["spec"].get("hostNetwork", False) is False
    node = eventually(
        lambda: is_ready(n := cluster.kube.get(r.NODES, cluster.node.spec.name)) and n,
        timeout=TIMEOUT, message="Node Ready once its CNI network exists",
    )  # fmt: skip
    assert node["spec"]["podCIDRs"] == [str(pod_network)]

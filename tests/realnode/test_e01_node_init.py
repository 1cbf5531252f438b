"""E01: a real kubelet registers its Node with ``--cloud-provider=external``, and the chart,
installed with the real helm from the packaged chart, initialises it: the DaemonSet's Pod,
started by containerd from the imported image under the chart's securityContext and admission
policy, writes the InternalIP it finds in the node's routing table (eth0's address), the
metadata labels of its rules, and removes the uninitialized taint.

Once without and once with the kubelet's ``--node-ip`` (a node, with its own plane, per
parameter): without it the kubelet registers only a Hostname address; with it the kubelet
writes the InternalIP and the ``provided-node-ip`` annotation, which the agent honours.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from local_ccm.names import PROVIDED_NODE_IP_ANNOTATION, UNINITIALIZED_TAINT
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.oci import host_arch, image_archive, oci_arch, read_archive
from tests.support.realnode_chart import NAMESPACE, install_packaged
from tests.support.realnode_cluster import Cluster, realnode_cluster
from tests.support.waiting import eventually

INIT_TIMEOUT = 180.0
RULES = {
    "defaultInstanceType": False,
    "rules": [{
        "name": "e01",
        "match": {"addresses": ["192.0.2.0/25"]},
        "zone": "e01-zone", "region": "e01-region", "instanceType": "{arch}",
        "labels": {"local-ccm.io/e01": "matched"},
    }],
}  # fmt: skip


@dataclass(frozen=True)
class Installed:
    seconds: float  # helm install --wait


@pytest.fixture(scope="module", params=[False, True], ids=["no-node-ip", "node-ip"])
def cluster(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[Cluster]:
    with realnode_cluster(request.config, binaries, node_ip=request.param) as started:
        yield started


@pytest.fixture(scope="module")
def installed(
    cluster: Cluster, binaries: Binaries, tmp_path_factory: pytest.TempPathFactory
) -> Installed:
    """The packaged chart, installed once the registration test has seen the Node as the
    kubelet left it (``cluster.registered``, taken when it first was Ready)."""
    values = {"nodeMetadata": {"rules": RULES}}
    return Installed(install_packaged(cluster, binaries.path("helm"), tmp_path_factory, values))


def addresses(node: dict[str, Any]) -> list[tuple[str, str]]:
    return [(a["type"], a["address"]) for a in node["status"].get("addresses", [])]


def taint_keys(node: dict[str, Any]) -> list[str]:
    return [t["key"] for t in node["spec"].get("taints", [])]


def test_e01_the_kubelet_registers_the_node_uninitialised(cluster: Cluster) -> None:
    node, name = cluster.registered, cluster.node.spec.name
    assert UNINITIALIZED_TAINT in taint_keys(node)
    annotations = node["metadata"].get("annotations", {})
    if cluster.node.spec.node_ip:
        assert addresses(node) == [("InternalIP", cluster.node.address), ("Hostname", name)]
        assert annotations[PROVIDED_NODE_IP_ANNOTATION] == cluster.node.address
    else:
        assert addresses(node) == [("Hostname", name)]
        assert PROVIDED_NODE_IP_ANNOTATION not in annotations


def initialised(cluster: Cluster) -> dict[str, Any] | None:
    node = cluster.kube.get(r.NODES, cluster.node.spec.name)
    return None if UNINITIALIZED_TAINT in taint_keys(node) else node


def test_e01_the_chart_s_agent_initialises_the_real_node(
    cluster: Cluster, installed: Installed
) -> None:
    node = eventually(lambda: initialised(cluster), timeout=INIT_TIMEOUT,
                      message=f"uninitialized taint removed\n{cluster.node.tails()}")  # fmt: skip
    assert addresses(node) == [
        ("InternalIP", cluster.node.address),
        ("Hostname", cluster.node.spec.name),
    ]
    labels = node["metadata"]["labels"]
    assert labels["topology.kubernetes.io/zone"] == "e01-zone"
    assert labels["topology.kubernetes.io/region"] == "e01-region"
    assert labels["node.kubernetes.io/instance-type"] == oci_arch(platform.machine())
    assert labels["local-ccm.io/e01"] == "matched"


def test_e01_the_agent_runs_from_the_imported_image_on_that_node(
    cluster: Cluster, installed: Installed
) -> None:
    selector = "app.kubernetes.io/component=agent"
    (pod,) = cluster.kube.list(r.PODS, namespace=NAMESPACE, label_selector=selector)["items"]
    assert pod["spec"]["nodeName"] == cluster.node.spec.name
    assert pod["status"]["phase"] == "Running"
    (status,) = pod["status"]["containerStatuses"]
    repository, tag = cluster.image
    assert status["image"] == f"{repository}:{tag}"
    # these very bytes: containerd's image ID is the config of this machine's platform
    assert status["imageID"] == read_archive(image_archive()).platforms[host_arch()].config_digest
    assert status["ready"] is True

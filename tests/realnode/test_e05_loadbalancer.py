"""E05: a Service of type LoadBalancer gets an address from a pool, with service-lb-ipam running
as the chart deploys it: the packaged chart, installed with the real helm, runs
local-ccm-controller-manager (the lifecycle controller and service-lb-ipam) as a Pod the real
kubelet starts from the imported image, and creates the LoadBalancerIPPool of its values (a
post-install hook, after the CRD it installs). Announcing the address is out of scope: nothing
here leaves the machine, and the pool's addresses are data only (docs/testing.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Network, ip_address
from typing import Any

import pytest

from local_ccm.lbipam.api import POOLS, SERVICES
from tests.support.binaries import Binaries
from tests.support.realnode_chart import install_packaged, manager_pod
from tests.support.realnode_cluster import Cluster, realnode_cluster
from tests.support.waiting import eventually

TIMEOUT = 120.0
POOL = IPv4Network("203.0.113.240/28")
SERVICE = "e05"
VALUES = {
    "controllerManager": {
        "enabled": True,
        "loadBalancer": {"enabled": True, "pools": [{"name": "e05", "addresses": [str(POOL)]}]},
    },
    "nodeLifecycleController": {"enabled": True, "replicaCount": 1},
}


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[Cluster]:
    with realnode_cluster(request.config, binaries) as started:
        yield started


@pytest.fixture(scope="module")
def installed(
    cluster: Cluster, binaries: Binaries, tmp_path_factory: pytest.TempPathFactory
) -> float:
    return install_packaged(cluster, binaries.path("helm"), tmp_path_factory, VALUES)


@pytest.fixture(scope="module")
def service(cluster: Cluster, installed: float) -> dict[str, Any]:
    """A classless Service of type LoadBalancer, once its status names an address."""
    body = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": "default"},
        "spec": {"type": "LoadBalancer",
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80}]},
    }  # fmt: skip
    cluster.kube.create(SERVICES, body, namespace="default")

    def addressed() -> dict[str, Any] | None:
        found = cluster.kube.get(SERVICES, SERVICE, namespace="default")
        return found if found["status"].get("loadBalancer", {}).get("ingress") else None

    return eventually(addressed, timeout=TIMEOUT,
                      message=f"Service address\n{cluster.node.tails()}")  # fmt: skip


def test_e05_the_manager_runs_service_lb_ipam_on_the_real_node(
    cluster: Cluster, installed: float
) -> None:
    pod = manager_pod(cluster)
    assert pod["spec"]["nodeName"] == cluster.node.spec.name
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["ready"] is True
    (container,) = pod["spec"]["containers"]
    assert container["image"] == ":".join(cluster.image)
    assert "--controllers=node-lifecycle,service-lb-ipam" in container["args"]


def test_e05_the_chart_creates_the_pool_of_its_values(cluster: Cluster, installed: float) -> None:
    pool = cluster.kube.get(POOLS, "e05")
    assert pool["spec"]["addresses"] == [str(POOL)]
    assert pool["metadata"]["labels"]["app.kubernetes.io/component"] == "service-lb-ipam"


def test_e05_a_load_balancer_service_gets_an_address_from_the_pool(
    service: dict[str, Any],
) -> None:
    (ingress,) = service["status"]["loadBalancer"]["ingress"]
    assert ip_address(ingress["ip"]) in POOL
    assert service["spec"]["clusterIP"] != ingress["ip"]

"""E09: a client on the node's segment reaches a Pod through its Service's LoadBalancer address,
end to end on the real node: service-lb-ipam gives the Service an address of a pool with
``spec.l2Announcement``, the agent (the chart with ``l2Announcement.enabled``, root with
CAP_NET_RAW alone) takes the address's Lease and answers ARP for it with the MAC of the node's
``eth0``, and kube-proxy (iptables mode, in the node's network namespace) DNATs the client's
connection to the Pod.

The segment: the node's ``eth0`` is a veth to its gateway namespace; the test puts a bridge
there, moves the gateway's side onto it and adds a client namespace with a port of its own,
all in namespaces of the node's name (nothing touches the host's interfaces, nothing leaves the
machine). The pool lies in the node's /25, so the agent answers on ``eth0`` (the interface on
the address's prefix) and the client resolves the address on its link. kube-proxy in iptables
mode puts no Service address on an interface, so the node's kernel never answers for it
(IPVS mode would, on ``kube-ipvs0``, unless ``strictARP``): every ARP reply the client gets
names the agent's MAC.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Interface, IPv4Network, ip_address
from typing import Any

import pytest

from local_ccm.lbipam.api import POOLS, SERVICES
from tests.support import nodeconf as nc
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.netns import Namespace, run_ip
from tests.support.realnode import delete_namespaces
from tests.support.realnode_chart import install_packaged
from tests.support.realnode_cluster import Cluster, NodeOptions, realnode_cluster
from tests.support.waiting import eventually

TIMEOUT = 120.0
# In the node's /25 (eth0 192.0.2.10, the gateway .126), clear of both and of the client.
POOL = IPv4Network("192.0.2.96/29")
CLIENT = IPv4Interface("192.0.2.50/25")
SERVICE = "e09"
APP = {"app": "e09"}
PORT = 8080
VALUES = {
    "controllerManager": {
        "enabled": True,
        "loadBalancer": {"enabled": True, "pools": [
            {"name": "e09", "addresses": [str(POOL)], "l2Announcement": {}},
        ]},
    },
    "nodeLifecycleController": {"enabled": True, "replicaCount": 1},
    "l2Announcement": {"enabled": True},
}  # fmt: skip
# The Pod's server: the project's image has Python; the body names the Pod (its hostname) and
# the address the connection came from.
SERVER = """
import http.server, socket
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"pod={socket.gethostname()} peer={self.client_address[0]}\\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.ThreadingHTTPServer(("", PORT), Handler).serve_forever()
""".replace("PORT", str(PORT))


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[Cluster]:
    # the EndpointSlice controller: kube-proxy programs a Service's endpoints from its slices
    options = NodeOptions(kube_proxy=True, kcm_controllers=("endpointslice-controller",))
    with realnode_cluster(request.config, binaries, options=options) as started:
        yield started


@pytest.fixture(scope="module")
def client(cluster: Cluster) -> Iterator[Namespace]:
    """The client's namespace, on a bridge in the node's gateway namespace with the node's
    ``eth0``; removed with its veth at the end (the node removes the gateway and its bridge)."""
    if shutil.which("arping") is None or shutil.which("curl") is None:
        pytest.fail("E09 needs arping (iputils-arping) and curl: scripts/setup.sh installs them",
                    pytrace=False)  # fmt: skip
    names = cluster.node.names
    gateway, ns = Namespace(names.gateway_ns), Namespace(f"{names.tag}-cl")
    run_ip("netns", "add", ns.name)
    try:
        ns.sysctl("net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        run_ip("link", "add", "name", "eth0", "netns", ns.name, "type", "veth",
               "peer", "name", "cl0", "netns", gateway.name)  # fmt: skip
        gateway.batch(
            "link add br0 type bridge", "link set br0 up",
            f"addr del {nc.GATEWAY_V4} dev gw0", "link set gw0 master br0",
            "link set cl0 master br0", "link set cl0 up", f"addr add {nc.GATEWAY_V4} dev br0",
        )  # fmt: skip
        ns.batch("link set lo up", "link set eth0 up", f"addr add {CLIENT} dev eth0")
        yield ns
    finally:
        delete_namespaces([ns.name])


@pytest.fixture(scope="module")
def installed(
    cluster: Cluster, binaries: Binaries, tmp_path_factory: pytest.TempPathFactory
) -> float:
    return install_packaged(cluster, binaries.path("helm"), tmp_path_factory, VALUES)


@pytest.fixture(scope="module")
def pod(cluster: Cluster) -> dict[str, Any]:
    """A Pod of the project's image serving HTTP on the pod network, once it is ready."""
    repository, tag = cluster.image
    body = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "e09-web", "namespace": "default", "labels": APP},
        "spec": {
            "containers": [{
                "name": "web", "image": f"{repository}:{tag}", "imagePullPolicy": "Never",
                "command": ["python3", "-c", SERVER],
                "ports": [{"containerPort": PORT}],
                "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 1},
            }],
            "tolerations": [{"operator": "Exists"}],
        },
    }  # fmt: skip
    cluster.kube.create(r.PODS, body, namespace="default")

    def ready() -> dict[str, Any] | None:
        found = cluster.kube.get(r.PODS, "e09-web", namespace="default")
        statuses = found["status"].get("containerStatuses") or []
        return found if statuses and statuses[0].get("ready") else None

    return eventually(ready, timeout=TIMEOUT, message=f"Pod ready\n{cluster.node.tails()}")


@pytest.fixture(scope="module")
def address(cluster: Cluster, installed: float, pod: dict[str, Any]) -> IPv4Address:
    """The LoadBalancer address service-lb-ipam gives the Service."""
    body = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": "default"},
        "spec": {"type": "LoadBalancer", "selector": APP,
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80,
                            "targetPort": PORT}]},
    }  # fmt: skip
    cluster.kube.create(SERVICES, body, namespace="default")

    def addressed() -> str | None:
        found = cluster.kube.get(SERVICES, SERVICE, namespace="default")
        ingress = found["status"].get("loadBalancer", {}).get("ingress") or []
        return ingress[0]["ip"] if ingress else None

    found = eventually(addressed, timeout=TIMEOUT,
                       message=f"Service address\n{cluster.node.tails()}")  # fmt: skip
    return IPv4Address(found)


def node_mac(cluster: Cluster) -> str:
    link = Namespace(cluster.node.names.node_ns).ip_json("link", "show", "eth0")[0]
    return str(link["address"]).lower()


def arping(client: Namespace, address: IPv4Address, count: int = 3) -> set[str]:
    """The MACs that answered iputils' arping from the client."""
    argv = ["arping", "-c", str(count), "-w", str(count + 1), "-I", "eth0", str(address)]
    done = client.exec(*argv, check=False)
    return {m.lower() for m in re.findall(r"reply from \S+ \[([0-9A-Fa-f:]{17})\]", done.stdout)}


def fetch(client: Namespace, address: IPv4Address) -> str | None:
    """GET http://<address>/ from the client's namespace; None until it answers."""
    done = client.exec("curl", "-sS", "--max-time", "3", f"http://{address}/", check=False)
    return done.stdout if done.returncode == 0 else None


def test_e09_the_address_comes_from_the_announced_pool(
    cluster: Cluster, address: IPv4Address
) -> None:
    assert address in POOL
    assert cluster.kube.get(POOLS, "e09")["spec"]["l2Announcement"] == {}


def test_e09_the_client_resolves_the_address_to_the_node_s_eth0(
    cluster: Cluster, client: Namespace, address: IPv4Address
) -> None:
    mac = node_mac(cluster)
    # Only the agent answers: the same single MAC every time, never the kernel's or another.
    answered = eventually(
        lambda: arping(client, address), timeout=TIMEOUT,
        message=f"an ARP reply for {address}\n{cluster.node.tails()}",
    )  # fmt: skip
    assert answered == {mac}
    assert arping(client, address, count=5) == {mac}
    # kube-proxy's iptables mode put the address on no interface of the node (IPVS mode would
    # bind it to kube-ipvs0, and without strictARP the kernel would answer too)
    node = Namespace(cluster.node.names.node_ns)
    local = {a["local"] for link in node.ip_json("addr", "show") for a in link["addr_info"]}
    assert str(address) not in local
    lease = cluster.kube.get(r.LEASES, f"l2-{address}", namespace="kube-system")
    assert lease["spec"]["holderIdentity"] == cluster.node.spec.name


def test_e09_a_client_on_the_segment_reaches_the_pod_through_the_address(
    cluster: Cluster, client: Namespace, address: IPv4Address, pod: dict[str, Any]
) -> None:
    body = eventually(lambda: fetch(client, address), timeout=TIMEOUT,
                      message=f"HTTP from the client to {address}\n"
                              f"{cluster.node.tails()}")  # fmt: skip
    assert f"pod={pod['metadata']['name']} " in body
    # kube-proxy's rule for the address is what took it to the Pod
    rules = Namespace(cluster.node.names.node_ns).exec("iptables-save", "-t", "nat").stdout
    assert re.search(rf"-A KUBE-SERVICES -d {re.escape(str(address))}/32 .*loadbalancer IP", rules)
    # The client's kernel learnt the address from the agent's reply: the node's eth0.
    (entry,) = client.ip_json("neigh", "show", "dev", "eth0", "to", str(address))
    assert entry["lladdr"].lower() == node_mac(cluster)
    assert ip_address(pod["status"]["podIP"]) in nc.POD_SUBNET

"""E08: the release as an operator installs it from a registry, on a real node. `make publish`
pushes the release (scripts/release.py's, as `make release` writes it) to a docker-registry on
127.0.0.1 serving TLS with a CA of the test's (REGISTRY_CA; signed with a key pair of the
test's); the chart is installed with ``helm install oci://...`` with ``image.repository``
pointing at that registry and ``pullPolicy: Always``; the node's containerd pulls the image
itself: its ``config_path`` has a ``hosts.toml`` for the registry naming that CA (without it
containerd 1.6 speaks plain HTTP to a loopback registry, and the pull fails); the registry's
port is relayed into the node namespace as the apiserver's is. The agent's Pod becomes Ready
and initialises the Node, and the image containerd pulled has the digest `make publish` pushed.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from local_ccm import __version__
from local_ccm.names import UNINITIALIZED_TAINT
from tests.support import nodeconf as nc
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.realnode_chart import NAMESPACE, node_values, run_helm
from tests.support.realnode_cluster import Cluster, realnode_cluster
from tests.support.registry import (
    Registry,
    key_pair,
    make,
    release_digest,
    running_registry,
    tool_env,
    write_release,
)
from tests.support.relay import LoopbackRelay
from tests.support.waiting import eventually

INIT_TIMEOUT = 180.0
PATH = "lcrn"  # REGISTRY's path


@dataclass(frozen=True)
class Published:
    registry: Registry
    digest: str  # what `make publish` pushed (the release's own)

    @property
    def repository(self) -> str:
        return f"{self.registry.host}/{PATH}/local-ccm"

    @property
    def chart(self) -> str:
        return f"oci://{self.registry.host}/{PATH}/charts/local-ccm"


@pytest.fixture(scope="module")
def published(
    cosign_binary: Path, binaries: Binaries, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Published]:
    work = tmp_path_factory.mktemp("e08")
    dist = write_release(work / "dist", binaries.path("helm"))
    keys = key_pair(cosign_binary, work / "keys")
    with running_registry(work / "registry", tls=True) as registry:
        code, output = make("publish", {
            "REGISTRY": f"{registry.host}/{PATH}", "REGISTRY_CA": str(registry.ca_file),
            "COSIGN_KEY": str(keys.private), "DIST": str(dist),
        }, tool_env(work))  # fmt: skip
        assert code == 0, output
        yield Published(registry, release_digest(dist))


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, binaries: Binaries, published: Published
) -> Iterator[Cluster]:
    """A node whose containerd trusts the registry's CA, reaching it at the same
    ``127.0.0.1:<port>`` inside the node namespace through a relay."""
    host = published.registry.host
    port = int(host.rsplit(":", 1)[1])
    with realnode_cluster(request.config, binaries) as started:
        ca = published.registry.ca_file
        hosts = nc.registry_hosts_toml(host, plain_http=False, ca=ca)
        started.node.trust_registry(host, hosts)
        with LoopbackRelay(started.node.names.node_ns, ("127.0.0.1", port)):
            yield started


@pytest.fixture(scope="module")
def installed(cluster: Cluster, binaries: Binaries, published: Published) -> float:
    image = {"repository": published.repository, "tag": f"v{__version__}", "pullPolicy": "Always"}
    values = {**node_values(cluster), "image": image}
    extra = ("--version", __version__, "--ca-file", str(published.registry.ca_file))
    return run_helm(cluster, binaries.path("helm"), "install", published.chart, values=values,
                    extra=extra)  # fmt: skip


def initialised(cluster: Cluster) -> dict[str, Any] | None:
    node = cluster.kube.get(r.NODES, cluster.node.spec.name)
    taints = [t["key"] for t in node["spec"].get("taints", [])]
    return None if UNINITIALIZED_TAINT in taints else node


def agent_pod(cluster: Cluster) -> dict[str, Any]:
    selector = "app.kubernetes.io/component=agent"
    (pod,) = cluster.kube.list(r.PODS, namespace=NAMESPACE, label_selector=selector)["items"]
    return dict(pod)


def test_e08_the_agent_from_the_registry_initialises_the_node(
    cluster: Cluster, installed: float
) -> None:
    print(f"helm install --wait from oci:// took {installed:.1f} s")
    node = eventually(lambda: initialised(cluster), timeout=INIT_TIMEOUT,
                      message=f"uninitialized taint removed\n{cluster.node.tails()}")  # fmt: skip
    addresses = [(a["type"], a["address"]) for a in node["status"]["addresses"]]
    assert addresses == [("InternalIP", cluster.node.address), ("Hostname", cluster.node.spec.name)]
    pod = agent_pod(cluster)
    assert pod["spec"]["nodeName"] == cluster.node.spec.name
    (container,) = pod["spec"]["containers"]
    assert container["imagePullPolicy"] == "Always"
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"] is True


def test_e08_containerd_pulled_the_pushed_digest(
    cluster: Cluster, installed: float, published: Published
) -> None:
    (status,) = agent_pod(cluster)["status"]["containerStatuses"]
    assert status["image"] == f"{published.repository}:v{__version__}"
    assert status["imageID"] == f"{published.repository}@{published.digest}"
    listed = subprocess.run(
        ["ctr", "--address", str(cluster.node.files.socket), "--namespace", "k8s.io",
         "images", "ls"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    refs = {line.split()[0]: line.split()[2] for line in listed.splitlines()[1:] if line.strip()}
    assert refs[f"{published.repository}:v{__version__}"] == published.digest, listed
    assert refs[f"{published.repository}@{published.digest}"] == published.digest, listed

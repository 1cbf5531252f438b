"""E02: the plain manifests, applied with the real kubectl and no namespace default, initialise a
real node.

Two routes of docs/install.md, a node (with its own plane) per route:

- ``deploy``: ``kubectl apply -f deploy/local-ccm.yaml``, the file as shipped;
- ``talos-inline``: the render Talos' ``cluster.inlineManifests`` are made of,
  ``helm template local-ccm charts/local-ccm -n kube-system --set apiServer.host=localhost
  --set apiServer.port=7445``, applied as it comes out.

kubectl runs with a kubeconfig whose context names no namespace, so an object without
``metadata.namespace`` would land in ``default``. There, as on Talos (whose apiserver enforces
Pod Security ``baseline`` everywhere but ``kube-system``), ``default`` enforces ``baseline``,
which refuses the agent's host-network Pod. The kubelet runs with ``--node-ip`` (the static
manifests set no InternalIP detection; docs/install.md). Nothing in the manifests is changed:
their image name (``ghcr.io/...``, ``IfNotPresent``) is a second tag of the imported image in
the node's containerd, and the API is reached the way each route expects it, the
``kubernetes`` Service's ClusterIP answered inside the node as kube-proxy would
(``realnode_cluster.kubernetes_service``) and KubePrism's ``localhost:7445`` by a loopback relay.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from local_ccm.kube.errors import ApiError
from local_ccm.names import ADDRESSES_SYNCED_CONDITION, UNINITIALIZED_TAINT
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.chart import CHART, DEPLOY, KINDS, helm, parse
from tests.support.realnode_cluster import Cluster, realnode_cluster
from tests.support.relay import LoopbackRelay
from tests.support.waiting import eventually

INIT_TIMEOUT = 180.0
NAMESPACE = "kube-system"  # what docs/install.md promises for both routes
ENFORCE = "pod-security.kubernetes.io/enforce"
KUBEPRISM_PORT = 7445
TALOS_SETS = {"apiServer.host": "localhost", "apiServer.port": str(KUBEPRISM_PORT)}
ROUTES = ("deploy", "talos-inline")
Place = tuple[str, str, str]  # kind, name, namespace


@dataclass(frozen=True)
class Applied:
    files: tuple[Path, ...]
    objects: tuple[dict[str, Any], ...]


@pytest.fixture(scope="module", params=ROUTES)
def route(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def cluster(route: str, request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[Cluster]:
    with realnode_cluster(request.config, binaries, node_ip=True) as started:
        yield started


def talos_render(helm_binary: Path, out: Path) -> Path:
    """``helm template`` exactly as docs/install.md's Talos section has it."""
    sets = [a for k, v in TALOS_SETS.items() for a in ("--set", f"{k}={v}")]
    with helm(helm_binary) as h:
        result = h.run("template", "local-ccm", str(CHART), "-n", NAMESPACE, *sets)
    assert result.code == 0, result.output
    out.write_text(result.stdout)
    return out


def kubeconfig_without_namespace(admin: Path, out: Path) -> Path:
    config = yaml.safe_load(admin.read_text())
    for context in config["contexts"]:
        context["context"].pop("namespace", None)
    out.write_text(yaml.safe_dump(config))
    return out


def kubectl(binaries: Binaries, kubeconfig: Path, *args: str) -> str:
    argv = [str(binaries.path("kubectl")), "--kubeconfig", str(kubeconfig), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def tag_image(cluster: Cluster, name: str) -> None:
    """``name`` as a second tag of the imported image in the node's containerd."""
    repository, tag = cluster.image
    ctr = ["ctr", "--address", str(cluster.node.files.socket), "--namespace", "k8s.io"]
    subprocess.run([*ctr, "images", "tag", "--force", f"{repository}:{tag}", name],
                   check=True, capture_output=True, timeout=60)  # fmt: skip


def enforce_baseline_in_default(cluster: Cluster) -> None:
    labels = {"metadata": {"labels": {ENFORCE: "baseline"}}}
    cluster.kube.patch(r.NAMESPACES, "default", labels, patch_type="merge")


def images_of(objects: list[dict[str, Any]]) -> set[str]:
    return {
        c["image"]
        for o in objects if o["kind"] in ("DaemonSet", "Deployment")
        for c in o["spec"]["template"]["spec"]["containers"]
    }  # fmt: skip


def api_endpoint(route: str, cluster: Cluster) -> AbstractContextManager[object]:
    """The API where each route's Pods look for it: the ``kubernetes`` Service's ClusterIP (as
    kube-proxy would answer it) for deploy/, KubePrism's ``localhost:7445`` for Talos."""
    if route == "deploy":
        return nullcontext()  # every node of the tier answers the Service (realnode_cluster)
    target = ("127.0.0.1", cluster.node.spec.api_port)
    return LoopbackRelay(cluster.node.names.node_ns, target, port=KUBEPRISM_PORT)


@pytest.fixture(scope="module")
def applied(
    route: str, cluster: Cluster, binaries: Binaries, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Applied]:
    work = tmp_path_factory.mktemp("e02")
    if route == "deploy":
        files: tuple[Path, ...] = (DEPLOY / "local-ccm.yaml",)
    else:
        files = (talos_render(binaries.path("helm"), work / "inline.yaml"),)
    objects = [o for f in files for o in parse(f.read_text())]
    enforce_baseline_in_default(cluster)
    for image in images_of(objects):
        tag_image(cluster, image)
    kubeconfig = kubeconfig_without_namespace(cluster.plane.admin_kubeconfig, work / "kubeconfig")
    with api_endpoint(route, cluster):
        kubectl(binaries, kubeconfig, "apply", *(a for f in files for a in ("-f", str(f))))
        yield Applied(files, tuple(objects))


def expected_places(objects: tuple[dict[str, Any], ...]) -> set[Place]:
    """(kind, name, namespace) of every namespaced object: where the file puts it, and
    kube-system (the route's ``-n``) where it names none."""
    return {
        (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace") or NAMESPACE)
        for o in objects if KINDS[o["kind"]].namespaced
    }  # fmt: skip


def server_places(binaries: Binaries, cluster: Cluster, kinds: set[str]) -> set[Place]:
    """(kind, name, namespace) of every object of ``kinds`` the apiserver holds."""
    plurals = ",".join(sorted(KINDS[k].plural for k in kinds))
    listed = json.loads(kubectl(binaries, cluster.plane.admin_kubeconfig, "get", plurals, "-A",
                                "-o", "json"))  # fmt: skip
    return {(o["kind"], o["metadata"]["name"], o["metadata"]["namespace"]) for o in listed["items"]}


def test_e02_no_context_namespace_and_default_refuses_host_network(
    cluster: Cluster, applied: Applied, tmp_path: Path
) -> None:
    """The premise: the kubeconfig names no namespace, and ``default`` refuses the agent's Pod."""
    config = yaml.safe_load(kubeconfig_without_namespace(cluster.plane.admin_kubeconfig,
                                                         tmp_path / "k").read_text())  # fmt: skip
    assert all("namespace" not in c["context"] for c in config["contexts"])
    (daemonset,) = (o for o in applied.objects if o["kind"] == "DaemonSet")
    spec = {k: v for k, v in daemonset["spec"]["template"]["spec"].items()
            if k != "serviceAccountName"}  # its ServiceAccount is not in default  # fmt: skip
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "e02-probe"}, "spec": spec}
    with pytest.raises(ApiError) as refused:
        cluster.kube.create(r.PODS, pod, namespace="default", dry_run=True)
    assert refused.value.status == 403
    assert 'violates PodSecurity "baseline:latest": host namespaces' in str(refused.value)


def test_e02_every_namespaced_object_lands_in_kube_system(
    binaries: Binaries, cluster: Cluster, applied: Applied
) -> None:
    expected = expected_places(applied.objects)
    found = server_places(binaries, cluster, {kind for kind, _, _ in expected})
    assert expected - found == set(), f"missing where the route puts them; found {sorted(found)}"
    assert ("DaemonSet", "local-ccm", NAMESPACE) in expected


def initialised(cluster: Cluster) -> dict[str, Any] | None:
    node = cluster.kube.get(r.NODES, cluster.node.spec.name)
    taints = [t["key"] for t in node["spec"].get("taints", [])]
    return None if UNINITIALIZED_TAINT in taints else node


def refusals(cluster: Cluster) -> str:
    """Why a workload has no Pod: its FailedCreate Events, wherever it landed."""
    events = cluster.kube.list(r.EVENTS, field_selector="reason=FailedCreate")["items"]
    return "\n".join(f"{e['metadata']['namespace']}/{e['involvedObject']['name']}: {e['message']}"
                     for e in events)  # fmt: skip


def wait_initialised(cluster: Cluster) -> dict[str, Any]:
    try:
        return eventually(lambda: initialised(cluster), timeout=INIT_TIMEOUT,
                          message="uninitialized taint removed")  # fmt: skip
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nFailedCreate events:\n{refusals(cluster)}\n"
                             f"{cluster.node.tails(5)}") from None  # fmt: skip


def test_e02_the_agent_initialises_the_node_from_kube_system(
    cluster: Cluster, applied: Applied
) -> None:
    node = wait_initialised(cluster)
    addresses = [(a["type"], a["address"]) for a in node["status"]["addresses"]]
    # The kubelet's --node-ip entry, kept; no ExternalIP: the lookup toward 8.8.8.8 (the
    # manifests' default) also finds eth0's address, and an ExternalIP equal to an InternalIP
    # is left out.
    assert addresses == [("InternalIP", cluster.node.address), ("Hostname", cluster.node.spec.name)]
    synced = [c for c in node["status"]["conditions"] if c["type"] == ADDRESSES_SYNCED_CONDITION]
    assert [c["status"] for c in synced] == ["True"]  # written by the agent
    selector = "app.kubernetes.io/component=agent"
    (pod,) = cluster.kube.list(r.PODS, namespace=NAMESPACE, label_selector=selector)["items"]
    assert pod["spec"]["nodeName"] == cluster.node.spec.name
    assert pod["status"]["phase"] == "Running"
    (status,) = pod["status"]["containerStatuses"]
    assert status["image"] in images_of(list(applied.objects))

"""E07: ``helm upgrade`` on a real node, to the packaged chart of this checkout, from the Go
original's chart (cozystack/local-ccm v0.2.1 and v0.3.0, the real charts D14 installs) and
from this chart's previous release: the old release's Pods are replaced by ours (a real
rollout: the DaemonSet's and the lifecycle Deployment's Pods deleted and re-created by the
controllers, scheduled, started by containerd), and the Node stays initialised throughout.

**The old releases' image.** There is no image of the Go original here (no registry; its source
tarball is not part of the repository, see tests/bench/originals.toml), so the Go charts are
installed exactly as they are, with their own values, except the image values, which name this
project's imported image: the Go chart's Pod specs (its flags, root with NET_ADMIN and NET_RAW,
in-cluster config) run our binary, which accepts every flag of the original. So the rollout is
real, and the old release provably works before the upgrade (it initialises the Node), but the
binary inside the old Pods is ours. The Go charts have no API endpoint value: their Pods use the
``kubernetes`` Service, which every node of the tier answers
(:func:`tests.support.realnode_cluster.kubernetes_service`, what kube-proxy would give it, for that
one Service).

**The previous release.** This chart has no earlier release: no tag, and 0.4.0 is the first
version number (src/local_ccm/__init__.py went from 0.1.0 to 0.4.0 in the commit that set it).
The "previous release" is therefore the chart as it was in that commit, packaged (``git archive
cfa4e7b charts/local-ccm``, then ``helm package``) and kept under
``tests/realnode/previous-chart/``.

Each scenario starts from a Node carrying the uninitialized taint (put back as the kubelet puts
it at registration), installs the old release with ``--wait``, waits until the old Pods removed
the taint, then polls the Node every 0.2 s while ``helm upgrade --wait`` runs, and uninstalls.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from local_ccm.kube.client import Client
from local_ccm.names import UNINITIALIZED_TAINT
from tests.support import resources as r
from tests.support.binaries import Binaries
from tests.support.chart import REPO
from tests.support.realnode_chart import NAMESPACE, node_values, package_chart, run_helm
from tests.support.realnode_cluster import FIELD_MANAGER, Cluster, realnode_cluster
from tests.support.ticker import Ticker
from tests.support.waiting import eventually

UPSTREAM = REPO / "tests" / "integration" / "deploy" / "upstream-charts"
# The chart as it was at the commit that set the first release number, 0.4.0 (cfa4e7b,
# "version: first release is 0.4.0"), packaged as `helm package` packs a release and kept in
# the repository, so the test needs no git history (CI may clone shallowly).
PREVIOUS_CHART = Path(__file__).parent / "previous-chart" / "local-ccm-0.4.0-cfa4e7b.tgz"
SOURCES = ("go-v0.2.1", "go-v0.3.0", "previous")
OWNERS = ["DaemonSet", "ReplicaSet"]  # the agent's DaemonSet, the lifecycle Deployment's
# What must roll at least. From the Go charts, everything (other flags, labels, security
# context). From the previous release (the same version number and image), the agent's Pod
# template is unchanged with these values, so Kubernetes rightly keeps its Pod; the lifecycle
# controller's gained --metrics-secure=true. Whatever else changed rolls too (``templates``).
ROLLED = {"go-v0.2.1": {"DaemonSet", "ReplicaSet"}, "go-v0.3.0": {"DaemonSet", "ReplicaSet"},
          "previous": {"ReplicaSet"}}  # fmt: skip
TIMEOUT = 180.0
POLL = 0.2
DAEMONSETS = r.Resource("apps", "v1", "daemonsets", "DaemonSet", True)
DEPLOYMENTS = r.Resource("apps", "v1", "deployments", "Deployment", True)


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, binaries: Binaries) -> Iterator[Cluster]:
    with realnode_cluster(request.config, binaries) as started:
        yield started


@pytest.fixture(scope="module")
def charts(binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The packaged chart of this checkout ("new") and every old one by source."""
    new = package_chart(tmp_path_factory.mktemp("new"), binaries.path("helm"))
    return {
        "new": new,
        "go-v0.2.1": UPSTREAM / "local-ccm-v0.2.1",
        "go-v0.3.0": UPSTREAM / "local-ccm-v0.3.0",
        "previous": PREVIOUS_CHART,
    }


def merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` deep-merged into a copy of ``base`` (as helm merges values files)."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def image(cluster: Cluster) -> dict[str, str]:
    repository, tag = cluster.image
    return {"repository": repository, "tag": tag, "pullPolicy": "Never"}


def go_values(cluster: Cluster, chart: Path) -> dict[str, Any]:
    """The Go chart's own values with the imported image and route lookups toward the node's
    gateway only (no ExternalIP target: a node on a private network)."""
    own = yaml.safe_load((chart / "values.yaml").read_text())
    detection = {"internalIPTarget": cluster.node.gateway, "externalIPTarget": ""}
    ours: dict[str, Any] = {"image": image(cluster), "ipDetection": detection}
    if "nodeLifecycleController" in own:
        ours["nodeLifecycleController"] = {"image": image(cluster)}
    return merged(own, ours)


def new_values(cluster: Cluster, source: str, old: Mapping[str, Any]) -> dict[str, Any]:
    """The documented migration from the Go chart: its values file without the image values;
    from the previous release: the same values. One lifecycle replica: two would share the
    node's host ports. The lifecycle controller is enabled (as in the Go v0.3.0 values), so the
    upgrade rolls a Deployment too."""
    plumbing = {**node_values(cluster), "nodeLifecycleController": {"enabled": True,
                                                                    "replicaCount": 1}}  # fmt: skip
    if not source.startswith("go-"):
        return merged(old, plumbing)
    kept = copy.deepcopy(dict(old))
    for section in (kept, kept.get("nodeLifecycleController", {})):
        section.pop("image", None)
    return merged(kept, plumbing)


def old_values(cluster: Cluster, source: str, chart: Path) -> dict[str, Any]:
    if source.startswith("go-"):
        return go_values(cluster, chart)
    return {**node_values(cluster), "nodeLifecycleController": {"enabled": True,
                                                                "replicaCount": 1}}  # fmt: skip


# ------------------------------------------------------------------ the Node and the Pods
def expected_addresses(cluster: Cluster) -> list[dict[str, str]]:
    return [{"type": "InternalIP", "address": cluster.node.address},
            {"type": "Hostname", "address": cluster.node.spec.name}]  # fmt: skip


def taint_keys(node: Mapping[str, Any]) -> list[str]:
    return [t["key"] for t in node["spec"].get("taints", [])]


def taint_uninitialised(cluster: Cluster) -> None:
    """Put the uninitialized taint back, as the kubelet sets it at registration."""
    node = cluster.kube.get(r.NODES, cluster.node.spec.name)
    if UNINITIALIZED_TAINT not in taint_keys(node):
        taint = {"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}
        node["spec"]["taints"] = [*node["spec"].get("taints", []), taint]
        cluster.kube.update(r.NODES, node)


def initialised(cluster: Cluster) -> bool:
    node = cluster.kube.get(r.NODES, cluster.node.spec.name)
    addresses = node["status"].get("addresses", [])
    return UNINITIALIZED_TAINT not in taint_keys(node) and addresses == expected_addresses(cluster)


def pods(kube: Client) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["uid"]: p for p in kube.list(r.PODS, namespace=NAMESPACE)["items"]}


def running_and_ready(pod: Mapping[str, Any]) -> bool:
    statuses = pod["status"].get("containerStatuses", [])
    return pod["status"].get("phase") == "Running" and all(s["ready"] for s in statuses)


class NodeWatch(Ticker):
    """Polls the Node every :data:`POLL` s in a thread of its own; ``lapses`` are the polls
    that saw it uninitialised (the taint back, or other addresses)."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(POLL, join=10)
        self.cluster, self.polls, self.lapses = cluster, 0, list[dict[str, Any]]()
        self.kube = Client.from_kubeconfig(cluster.plane.admin_kubeconfig,
                                           field_manager=FIELD_MANAGER)  # fmt: skip

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.kube.close()

    def tick(self) -> None:
        node = self.kube.get(r.NODES, self.cluster.node.spec.name)
        self.polls += 1
        addresses = node["status"].get("addresses", [])
        if UNINITIALIZED_TAINT in taint_keys(node) or addresses != expected_addresses(self.cluster):
            self.lapses.append({"taints": taint_keys(node), "addresses": addresses})


def templates(kube: Client) -> dict[str, dict[str, Any]]:
    """The Pod template of each workload, by the kind that owns its Pods."""
    found = {"DaemonSet": kube.list(DAEMONSETS, namespace=NAMESPACE)["items"],
             "ReplicaSet": kube.list(DEPLOYMENTS, namespace=NAMESPACE)["items"]}  # fmt: skip
    return {kind: one["spec"]["template"] for kind, (one,) in
            ((k, w) for k, w in found.items() if w)}  # fmt: skip


def settled(
    kube: Client, before: Mapping[str, Any], rolled: set[str]
) -> dict[str, dict[str, Any]] | None:
    """The Pods once the rollout is over: one ready Pod per owner kind, a new one for each kind
    in ``rolled`` (its template changed, or it is new), the old one for every other kind."""
    now = pods(kube)
    kinds = sorted(owner(p) for p in now.values())
    fresh = {owner(p) for uid, p in now.items() if uid not in before}
    kept = {owner(p) for uid, p in now.items() if uid in before}
    done = kinds == OWNERS and fresh == rolled and kept == set(OWNERS) - rolled
    return now if done and all(running_and_ready(p) for p in now.values()) else None


def container_args(pod: Mapping[str, Any]) -> list[str]:
    return list(pod["spec"]["containers"][0].get("args", []))


def owner(pod: Mapping[str, Any]) -> str:
    (ref,) = pod["metadata"]["ownerReferences"]
    return str(ref["kind"])


# ------------------------------------------------------------------ the scenarios
@pytest.mark.parametrize("source", SOURCES)
def test_e07_helm_upgrade_replaces_the_old_pods_and_the_node_stays_initialised(
    cluster: Cluster, binaries: Binaries, charts: dict[str, Path], source: str
) -> None:
    helm_binary, kube = binaries.path("helm"), cluster.kube
    taint_uninitialised(cluster)
    old = old_values(cluster, source, charts[source])
    run_helm(cluster, helm_binary, "install", charts[source], values=old)
    try:
        eventually(lambda: initialised(cluster), timeout=TIMEOUT,
                   message=f"the old release ({source}) initialised the Node")  # fmt: skip
        before, old_templates = pods(kube), templates(kube)
        lifecycle = source != "go-v0.2.1"  # the Go chart's lifecycle controller came in v0.3.0
        assert sorted(owner(p) for p in before.values()) == OWNERS[: 1 + lifecycle]
        with NodeWatch(cluster) as watch:
            run_helm(cluster, helm_binary, "upgrade", charts["new"],
                     values=new_values(cluster, source, old))  # fmt: skip
            new_templates = templates(kube)
            rolled = {k for k, tpl in new_templates.items() if old_templates.get(k) != tpl}
            after = eventually(lambda: settled(kube, before, rolled), timeout=TIMEOUT,
                               message=f"rollout of {sorted(rolled)} over")  # fmt: skip
        assert watch.polls > 0
        assert watch.lapses == [], watch.lapses
        assert ROLLED[source] <= rolled, rolled
        assert_rolled_out(cluster, before, after)
    finally:
        run_helm(cluster, helm_binary, "uninstall", None)
        eventually(lambda: not pods(kube), timeout=TIMEOUT, message="no Pod left")


def assert_rolled_out(
    cluster: Cluster, before: Mapping[str, Any], after: Mapping[str, Any]
) -> None:
    """Every Pod runs the imported image with the new chart's arguments (its workload's
    template); a replaced one's differ from those of the Pod it replaced."""
    repository, tag = cluster.image
    by_owner = {owner(p): p for p in before.values()}
    workloads = {
        "DaemonSet": cluster.kube.list(DAEMONSETS, namespace=NAMESPACE)["items"],
        "ReplicaSet": cluster.kube.list(DEPLOYMENTS, namespace=NAMESPACE)["items"],
    }
    for uid, pod in after.items():
        kind = owner(pod)
        (workload,) = workloads[kind]
        template = workload["spec"]["template"]["spec"]["containers"][0]
        assert pod["spec"]["containers"][0]["image"] == f"{repository}:{tag}"
        assert pod["spec"]["nodeName"] == cluster.node.spec.name
        assert container_args(pod) == template.get("args", [])
        if kind in by_owner and uid not in before:  # replaced: the old Pod ran other arguments
            assert container_args(pod) != container_args(by_owner[kind]), kind

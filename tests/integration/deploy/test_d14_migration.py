"""Upgrades from the real charts a cluster runs today (D14): the Go original's chart
(cozystack/local-ccm v0.2.1 and v0.3.0) and upstream kubernetes-sigs/node-ipam-controller's chart,
installed with the real helm on the real apiserver, then `helm upgrade` to this chart.

With their own values files the upgrade must fail at render time, before Helm changes anything,
naming each value to remove: those values name images that have none of this chart's flags, so
their Pods would crash-loop. The old release stays deployed at its revision with its objects
untouched. With the image values removed (the documented migration), the upgrade succeeds and
every Pod spec it applied is runnable: the real binary, started with exactly that container's
command, args and env and the workload's own ServiceAccount token, serves /healthz and exits 0
on SIGTERM. The charts are copies under upstream-charts/ (test data; see its NOTICE.md).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from local_ccm.kube.client import Client, Obj
from tests.integration.deploy.release import MAX_RELEASE
from tests.support import resources as r
from tests.support.chart import CHART, Helm, parse
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.podrun import PodFields, pod_container, run_container

UPSTREAM = Path(__file__).resolve().parent / "upstream-charts"
GO_CHARTS = ("local-ccm-v0.2.1", "local-ccm-v0.3.0")
# This chart as its first release number (0.4.0) packaged it, the one the real-node upgrade
# test (E07) starts from.
REALNODE = Path(__file__).resolve().parents[2] / "realnode"
FIRST_RELEASE = REALNODE / "previous-chart" / "local-ccm-0.4.0-cfa4e7b.tgz"
IPAM_CHART = UPSTREAM / "node-ipam-controller-aa9996c"
OUR_IMAGE = "ghcr.io/local-ccm/local-ccm:v"
WORKLOADS = (
    r.Resource("apps", "v1", "daemonsets", "DaemonSet", True),
    r.Resource("apps", "v1", "deployments", "Deployment", True),
)
CLUSTER_KINDS = {
    "ClusterRole": r.CLUSTER_ROLES,
    "ClusterRoleBinding": r.CLUSTER_ROLE_BINDINGS,
    "ValidatingAdmissionPolicy": r.VALIDATING_ADMISSION_POLICIES,
    "ValidatingAdmissionPolicyBinding": r.VALIDATING_ADMISSION_POLICY_BINDINGS,
}


class Releases:
    """helm against the test apiserver in the test namespace; every release it installed is
    uninstalled at teardown and its cluster-scoped objects are tracked for the final sweep."""

    def __init__(self, h: Helm, cp: ControlPlane, namespace: str, track: Tracker) -> None:
        self.h, self.namespace, self.track = h, namespace, track
        self.common = ["--kubeconfig", str(cp.admin_kubeconfig), "--namespace", namespace]
        self.names: list[str] = []

    def run(self, verb: str, release: str, *args: str) -> tuple[int, str]:
        if release not in self.names:
            self.names.append(release)
        done = self.h.run(verb, release, *args, *self.common)
        return done.code, done.output

    def history(self, release: str) -> list[dict[str, Any]]:
        done = self.h.run("history", release, "-o", "json", *self.common)
        assert done.code == 0, done.output
        return list(json.loads(done.stdout))

    def track_cluster_objects(self, release: str) -> None:
        done = self.h.run("get", "manifest", release, *self.common)
        for obj in parse(done.stdout) if done.code == 0 else []:
            if obj["kind"] in CLUSTER_KINDS:
                self.track(CLUSTER_KINDS[obj["kind"]], obj["metadata"]["name"])

    def uninstall_all(self) -> None:
        for release in reversed(self.names):
            self.track_cluster_objects(release)
            self.h.run("uninstall", release, *self.common, "--wait=false")


@pytest.fixture
def releases(
    chart_helm: Helm, control_plane: ControlPlane, test_namespace: str, track: Tracker
) -> Iterator[Releases]:
    rel = Releases(chart_helm, control_plane, test_namespace, track)
    yield rel
    rel.uninstall_all()


def _release_name(unique_name: str, suffix: str = "") -> str:
    name = unique_name if len(unique_name) + len(suffix) <= MAX_RELEASE else unique_name[-20:]
    return (name + suffix).lstrip("-")


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def _without_images(values: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``values`` with ``<key>.repository`` and ``<key>.tag`` removed: the documented fix."""
    out = copy.deepcopy(values)
    for key in keys:
        node = out
        for part in key.split("."):
            node = node[part]
        node.pop("repository", None)
        node.pop("tag", None)
    return out


def _workloads(kube: Client, namespace: str) -> dict[str, Obj]:
    return {
        f"{res.kind}/{w['metadata']['name']}": w
        for res in WORKLOADS
        for w in kube.list(res, namespace=namespace)["items"]
    }


def _versions(workloads: dict[str, Obj]) -> dict[str, str]:
    return {name: w["metadata"]["resourceVersion"] for name, w in workloads.items()}


def _assert_unchanged(rel: Releases, release: str, kube: Client, before: dict[str, Obj]) -> None:
    history = rel.history(release)
    assert [(h["revision"], h["status"]) for h in history] == [(1, "deployed")], history
    assert _versions(_workloads(kube, rel.namespace)) == _versions(before)


def _assert_runnable(
    cp: ControlPlane, namespace: str, node: str, workloads: dict[str, Obj], artifacts: Path
) -> None:
    """Each workload's container, as applied, runs under its own ServiceAccount's token."""
    assert workloads
    for name, w in sorted(workloads.items()):
        spec = w["spec"]["template"]["spec"]
        assert pod_container(w)["image"].startswith(OUR_IMAGE), (name, pod_container(w)["image"])
        kubeconfig = cp.token_kubeconfig(spec["serviceAccountName"], namespace)
        fields = PodFields(namespace, f"{w['metadata']['name'][:50]}-pod", node)
        log = artifacts / f"{name.replace('/', '-')}.log"
        outcome = run_container(w, fields=fields, kubeconfig=kubeconfig, log_path=log)
        assert outcome.healthy, f"{name} did not serve /healthz:\n{outcome.log}"
        assert outcome.exit_code == 0, f"{name} exited {outcome.exit_code}:\n{outcome.log}"


# ------------------------------------------------------------------ D14: this chart's release
def test_d14_reuse_values_from_an_earlier_release_is_refused_naming_what_to_use(
    releases: Releases, kube: Client, unique_name: str, test_namespace: str
) -> None:
    """`helm upgrade --reuse-values` renders with the defaults of the chart the release was
    installed from (Helm's behaviour), which lack the sections added since: refused with the
    sections and the flag to use, not a template's nil pointer; the release is unchanged, and
    --reset-then-reuse-values upgrades it."""
    release = _release_name(unique_name)
    code, out = releases.run("install", release, str(FIRST_RELEASE),
                             "--set", "apiServer.host=192.0.2.1")  # fmt: skip
    assert code == 0, out
    before = _workloads(kube, test_namespace)
    code, out = releases.run("upgrade", release, str(CHART), "--reuse-values")
    assert code != 0, out
    assert "nil pointer" not in out, out
    assert "the values lack sections this chart's defaults have (" in out, out
    assert "controllerManager.bmc" in out, out  # added after the first release
    assert "nothing was changed. Use --reset-then-reuse-values" in out, out
    _assert_unchanged(releases, release, kube, before)
    code, out = releases.run("upgrade", release, str(CHART), "--reset-then-reuse-values")
    assert code == 0, out
    assert [h["status"] for h in releases.history(release)] == ["superseded", "deployed"]


# ------------------------------------------------------------------ D14: the Go original
@pytest.mark.parametrize("go_chart", GO_CHARTS)
def test_d14_upgrade_from_the_go_chart_with_its_own_values(
    *,
    go_chart: str,
    releases: Releases,
    kube: Client,
    control_plane: ControlPlane,
    make_node: NodeFactory,
    unique_name: str,
    test_namespace: str,
    tmp_path: Path,
    test_artifacts: Path,
) -> None:
    chart = UPSTREAM / go_chart
    own_values = chart / "values.yaml"
    release = _release_name(unique_name)
    code, out = releases.run("install", release, str(chart), "-f", str(own_values))
    assert code == 0, out
    before = _workloads(kube, test_namespace)
    images = {pod_container(w)["image"] for w in before.values()}
    assert all(i.startswith("ghcr.io/cozystack/local-ccm:") for i in images), images

    code, out = releases.run("upgrade", release, str(CHART), "-f", str(own_values))
    assert code != 0, out
    assert "nothing was changed" in out, out
    assert "image.repository=ghcr.io/cozystack/local-ccm is the Go original's image" in out, out
    values = yaml.safe_load(own_values.read_text())
    if "nodeLifecycleController" in values:
        assert "nodeLifecycleController.image.repository=ghcr.io/cozystack/local-ccm" in out, out
    # --reuse-values renders with the Go chart's defaults (Helm's behaviour): refused, with the
    # flag to use instead; --reset-then-reuse-values keeps the stored image values: refused too.
    code, out = releases.run("upgrade", release, str(CHART), "--reuse-values")
    assert code != 0, out
    assert "Use --reset-then-reuse-values" in out, out
    code, out = releases.run("upgrade", release, str(CHART), "--reset-then-reuse-values")
    assert code != 0, out
    assert "image.repository=ghcr.io/cozystack/local-ccm is the Go original's image" in out, out
    _assert_unchanged(releases, release, kube, before)

    image_keys = ["image"] + (
        ["nodeLifecycleController.image"] if "nodeLifecycleController" in values else []
    )
    if go_chart.endswith("v0.3.0"):  # the documented fix: delete the lines from the file
        fixed = _write(tmp_path / "migrated.yaml", _without_images(values, *image_keys))
        code, out = releases.run("upgrade", release, str(CHART), "-f", str(fixed))
    else:  # or, keeping the stored values, delete them with null
        nulls = [f"{k}.{part}=null" for k in image_keys for part in ("repository", "tag")]
        code, out = releases.run("upgrade", release, str(CHART), "--reset-then-reuse-values",
                                 "--set", ",".join(nulls))  # fmt: skip
    assert code == 0, out
    after = _workloads(kube, test_namespace)
    assert {n for n in after if n.startswith("DaemonSet/")} == {
        n for n in before if n.startswith("DaemonSet/")
    }
    node = make_node()["metadata"]["name"]
    _assert_runnable(control_plane, test_namespace, node, after, test_artifacts)


# ------------------------------------------------------------------ D14: upstream IPAM
def test_d14_upstream_ipam_values_nested_under_node_ipam_controller(
    *,
    releases: Releases,
    kube: Client,
    control_plane: ControlPlane,
    crds: list[object],
    make_node: NodeFactory,
    unique_name: str,
    test_namespace: str,
    tmp_path: Path,
    test_artifacts: Path,
) -> None:
    # The session's apiserver already holds the ClusterCIDR CRD (not Helm's), so neither chart
    # installs it here; on a real cluster upstream's copy stays (helm.sh/resource-policy: keep).
    upstream_values = yaml.safe_load((IPAM_CHART / "values.yaml").read_text())
    no_crds = _write(tmp_path / "no-crds.yaml", {"installCRDs": False})
    upstream = _release_name(unique_name, "-up")
    code, out = releases.run(
        "install",
        upstream,
        str(IPAM_CHART),
        "-f",
        str(IPAM_CHART / "values.yaml"),
        "-f",
        str(no_crds),
    )
    assert code == 0, out
    before = _workloads(kube, test_namespace)
    assert [pod_container(w)["image"] for w in before.values()] == [
        "registry.k8s.io/node-ipam-controller:0.0.1"
    ]

    def ours(nested: dict[str, Any]) -> Path:
        doc = {
            "agent": {"enabled": False},
            "nodeLifecycleController": {"enabled": False},
            "nodeIpamController": {**nested, "enabled": True, "installCRDs": False},
        }
        return _write(tmp_path / "ours.yaml", doc)

    release = _release_name(unique_name, "-ours")
    code, out = releases.run(
        "upgrade", release, str(CHART), "--install", "-f", str(ours(upstream_values))
    )
    assert code != 0, out
    assert "nothing was changed" in out, out
    assert "nodeIpamController.image.repository=registry.k8s.io/node-ipam-controller" in out, out
    assert releases.h.run("status", release, *releases.common).code != 0, "release created"
    _assert_unchanged(releases, upstream, kube, before)

    fixed = ours(_without_images(upstream_values, "image"))
    code, out = releases.run("upgrade", release, str(CHART), "--install", "-f", str(fixed))
    assert code == 0, out
    after = _workloads(kube, test_namespace)
    new = {n: w for n, w in after.items() if n not in before}
    assert [pod_container(w)["name"] for w in new.values()] == ["node-ipam-controller"], new
    node = make_node()["metadata"]["name"]
    _assert_runnable(control_plane, test_namespace, node, new, test_artifacts)

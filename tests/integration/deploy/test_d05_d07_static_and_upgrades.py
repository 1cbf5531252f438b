"""Static manifests and upgrades from the original (D05-D07)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from local_ccm.kube.client import Client, Obj
from tests.integration.deploy.release import MAX_RELEASE
from tests.support import resources as r
from tests.support.chart import (
    CHART,
    DEPLOY,
    REPO,
    STATIC_FILES,
    ApplyResult,
    Helm,
    describe_failures,
    parse,
    server_side_apply,
    write_manifests,
)
from tests.support.cleanup import Tracker
from tests.support.controlplane import ControlPlane

ORIGINAL_CHART = Path(__file__).resolve().parent / "original-chart"
STATIC_MANAGER = "kubectl"  # `kubectl apply --server-side`: one field manager for both files


def makefile_image() -> str:
    match = re.search(r"^IMAGE \?= (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert match, "Makefile defines IMAGE"
    return match.group(1)


# ------------------------------------------------------------------ D05
def test_d05_static_manifests_are_generated_from_the_chart(
    chart_helm: Helm, tmp_path: Path
) -> None:
    write_manifests(chart_helm, tmp_path, makefile_image())
    stale = [s.path for s in STATIC_FILES
             if (tmp_path / s.path).read_text() != (DEPLOY / s.path).read_text()]  # fmt: skip
    assert not stale, f"deploy/ is stale, run `make manifests`: {stale}"


def test_d05_image_repository_is_defined_once() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"] == makefile_image()
    for s in STATIC_FILES:
        for obj in parse((DEPLOY / s.path).read_text()):
            for c in obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                assert c["image"].startswith(makefile_image() + ":v"), (s.path, c["image"])


def test_d05_static_files_hold_the_documented_objects() -> None:
    def kinds(path: str) -> set[tuple[str, str]]:
        return {(o["kind"], o["metadata"]["name"]) for o in parse((DEPLOY / path).read_text())}

    assert kinds("rbac.yaml") == {
        ("ServiceAccount", "local-ccm"), ("ClusterRole", "system:local-ccm"),
        ("ClusterRoleBinding", "system:local-ccm"), ("Role", "local-ccm-events"),
        ("RoleBinding", "local-ccm-events"),
    }  # fmt: skip
    assert kinds("daemonset.yaml") == {("DaemonSet", "local-ccm")}
    assert kinds("admission-policy.yaml") == {
        ("ValidatingAdmissionPolicy", "local-ccm-agent-node-scope"),
        ("ValidatingAdmissionPolicyBinding", "local-ccm-agent-node-scope"),
    }
    assert ("Deployment", "node-lifecycle-controller") in kinds("nlc-deployment.yaml")
    assert ("ClusterRole", "system:node-lifecycle-controller") in kinds("nlc-rbac.yaml")
    assert ("ClusterRole", "system:node-ipam-controller") in kinds("ipam-rbac.yaml")
    assert ("Deployment", "node-ipam-controller") in kinds("ipam-deployment.yaml")
    all_in_one = kinds("local-ccm.yaml")
    assert ("DaemonSet", "local-ccm") in all_in_one
    assert ("ValidatingAdmissionPolicy", "local-ccm-agent-node-scope") in all_in_one
    assert not [k for k in all_in_one if "ipam" in k[1]]
    # KubePrism (localhost:7445) for the Pods on the host network; the lifecycle controller in
    # a network namespace of its own, where localhost is its own, keeps the kubernetes Service.
    for obj in parse((DEPLOY / "talos" / "local-ccm.yaml").read_text()):
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        for c in pod.get("containers", []):
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            api = (env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT"))
            on_host = pod.get("hostNetwork") is True
            assert api == (("localhost", "7445") if on_host else (None, None)), obj["kind"]
    for s in STATIC_FILES:
        for obj in parse((DEPLOY / s.path).read_text()):
            if obj["kind"] in ("ServiceAccount", "DaemonSet", "Deployment", "PodDisruptionBudget"):
                assert obj["metadata"]["namespace"] == "kube-system", (s.path, obj["kind"])


# ------------------------------------------------------------------ D06
ORIGINAL_STATIC = """
apiVersion: v1
kind: ServiceAccount
metadata: {name: local-ccm, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:local-ccm"}
rules:
- {apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch", "patch"]}
- {apiGroups: [""], resources: ["nodes/status"], verbs: ["patch"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:local-ccm"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:local-ccm"}
subjects: [{kind: ServiceAccount, name: local-ccm, namespace: kube-system}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: local-ccm, namespace: kube-system, labels: {app: local-ccm}}
spec:
  selector: {matchLabels: {app: local-ccm}}
  template:
    metadata: {labels: {app: local-ccm, component: node-controller}}
    spec:
      serviceAccountName: local-ccm
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      containers:
      - name: local-ccm
        image: ghcr.io/cozystack/local-ccm:v0.1.0
        command: [/usr/local/bin/local-ccm]
        securityContext: {capabilities: {add: [NET_ADMIN, NET_RAW]}, runAsUser: 0}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: node-lifecycle-controller, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:node-lifecycle-controller"}
rules:
- {apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch", "delete"]}
- {apiGroups: [""], resources: ["events"], verbs: ["create", "patch"]}
- {apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get", "create", "update"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:node-lifecycle-controller"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole,
          name: "system:node-lifecycle-controller"}
subjects: [{kind: ServiceAccount, name: node-lifecycle-controller, namespace: kube-system}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: node-lifecycle-controller, namespace: kube-system}
spec:
  replicas: 1
  selector: {matchLabels: {app: node-lifecycle-controller}}
  template:
    metadata: {labels: {app: node-lifecycle-controller}}
    spec:
      serviceAccountName: node-lifecycle-controller
      hostNetwork: true
      containers:
      - name: node-lifecycle-controller
        image: ghcr.io/cozystack/local-ccm:v0.3.0
        command: [/usr/local/bin/node-lifecycle-controller]
"""


def _relocate(objs: list[Obj], namespace: str, labels: dict[str, str]) -> list[Obj]:
    """kube-system -> the test's namespace, and the run labels on every object."""
    text = yaml.safe_dump_all(objs).replace("kube-system", namespace)
    moved = [o for o in yaml.safe_load_all(text) if o]
    for obj in moved:
        obj["metadata"]["labels"] = {**(obj["metadata"].get("labels") or {}), **labels}
    return moved


def test_d06_static_manifests_upgrade_the_originals_in_place(
    control_plane: ControlPlane, kube: Client, track: Tracker, test_namespace: str,
    test_labels: dict[str, str],
) -> None:  # fmt: skip
    original = _relocate(list(yaml.safe_load_all(ORIGINAL_STATIC)), test_namespace, test_labels)
    new = _relocate(parse((DEPLOY / "local-ccm.yaml").read_text()), test_namespace, test_labels)
    for obj in original + new:
        kind, name = obj["kind"], obj["metadata"]["name"]
        cluster = {
            "ClusterRole": r.CLUSTER_ROLES,
            "ClusterRoleBinding": r.CLUSTER_ROLE_BINDINGS,
            "ValidatingAdmissionPolicy": r.VALIDATING_ADMISSION_POLICIES,
            "ValidatingAdmissionPolicyBinding": r.VALIDATING_ADMISSION_POLICY_BINDINGS,
        }
        if kind in cluster:
            track(cluster[kind], name)
        elif obj["metadata"].get("namespace") == "default":
            track(r.ROLES if kind == "Role" else r.ROLE_BINDINGS, name, "default")
    for objs in (original, new):
        failures = [
            (o, res) for o, res in ((o, _apply(control_plane, o, test_namespace)) for o in objs)
            if not res.ok
        ]  # fmt: skip
        assert not failures, describe_failures(failures)
    expected = {o["metadata"]["name"]: o["rules"] for o in new if o["kind"] == "ClusterRole"}
    for name, rules in expected.items():
        assert kube.get(r.CLUSTER_ROLES, name)["rules"] == rules, name
    ds = kube.get(r.Resource("apps", "v1", "daemonsets", "DaemonSet", True), "local-ccm",
                  namespace=test_namespace)  # fmt: skip
    sc = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert "add" not in sc["capabilities"]
    assert "runAsUser" not in sc


def _apply(cp: ControlPlane, obj: Obj, namespace: str) -> ApplyResult:
    return server_side_apply(cp.http, obj, namespace=namespace, dry_run=False,
                             field_manager=STATIC_MANAGER)  # fmt: skip


# ------------------------------------------------------------------ D07
@pytest.fixture
def helm_release(
    chart_helm: Helm, control_plane: ControlPlane, unique_name: str, test_namespace: str
) -> Iterator[tuple[str, list[str]]]:
    """(release name, the common helm flags); uninstalled at teardown."""
    release = unique_name if len(unique_name) <= MAX_RELEASE else f"lccm-{unique_name[-6:]}"
    common = ["--kubeconfig", str(control_plane.admin_kubeconfig), "--namespace", test_namespace]
    yield release, common
    chart_helm.run("uninstall", release, *common, "--wait=false")


def _pods_by_workload(
    kube: Client, namespace: str
) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    out = {}
    for plural, kind in (("daemonsets", "DaemonSet"), ("deployments", "Deployment")):
        res = r.Resource("apps", "v1", plural, kind, True)
        for w in kube.list(res, namespace=namespace)["items"]:
            out[f"{kind}/{w['metadata']['name']}"] = (
                w["spec"]["selector"]["matchLabels"],
                w["spec"]["template"]["metadata"]["labels"],
            )
    return out


def test_d07_helm_upgrade_over_the_original_chart(
    *,
    chart_helm: Helm, kube: Client, track: Tracker, helm_release: tuple[str, list[str]],
    test_namespace: str, test_labels: dict[str, str], tmp_path: Path, kube_version: str,
) -> None:  # fmt: skip
    release, common = helm_release
    values = tmp_path / "labels.yaml"
    values.write_text(yaml.safe_dump({"labels": test_labels}))
    done = chart_helm.run("install", release, str(ORIGINAL_CHART), *common, "-f", str(values))
    assert done.code == 0, done.output
    before = _pods_by_workload(kube, test_namespace)
    assert any(name.endswith("-nlc") for name in before), before
    done = chart_helm.run("upgrade", release, str(CHART), *common, "-f", str(values))
    rendered = parse(chart_helm.template(kube_version=kube_version, release=release,
                                         namespace=test_namespace, values=[values]))  # fmt: skip
    for obj in rendered:
        kind = obj["kind"]
        if kind in ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                    "ValidatingAdmissionPolicyBinding"):  # fmt: skip
            res = {
                "ClusterRole": r.CLUSTER_ROLES,
                "ClusterRoleBinding": r.CLUSTER_ROLE_BINDINGS,
                "ValidatingAdmissionPolicy": r.VALIDATING_ADMISSION_POLICIES,
                "ValidatingAdmissionPolicyBinding": r.VALIDATING_ADMISSION_POLICY_BINDINGS,
            }
            track(res[kind], obj["metadata"]["name"])
    assert done.code == 0, done.output
    after = _pods_by_workload(kube, test_namespace)
    assert not any(name.endswith("-nlc") for name in after), after
    agent = [n for n in after if n.startswith("DaemonSet/")]
    assert agent == [n for n in before if n.startswith("DaemonSet/")]
    for name, (selector, _) in after.items():
        for other, (_, labels) in after.items():
            matches = selector.items() <= labels.items()
            assert matches == (name == other), (name, other)

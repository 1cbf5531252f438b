"""One test's rendering of the chart and its identity objects applied for real: a unique
release name, the test's namespace, and the run/test labels on every object
(through the chart's ``labels`` value), so ``track()`` and the final sweep may delete them."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from local_ccm.kube.client import Client, Obj
from tests.support import resources as r
from tests.support.chart import Helm, apply_all, describe_failures, parse
from tests.support.cleanup import Tracker
from tests.support.controlplane import ControlPlane
from tests.support.logtext import answer_pattern

FORBIDDEN = answer_pattern(403, "Forbidden")  # in a log

IDENTITY_KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
MAX_RELEASE = 53
RESOURCES: Mapping[str, r.Resource] = {
    "ServiceAccount": r.SERVICE_ACCOUNTS,
    "ClusterRole": r.CLUSTER_ROLES,
    "ClusterRoleBinding": r.CLUSTER_ROLE_BINDINGS,
    "Role": r.ROLES,
    "RoleBinding": r.ROLE_BINDINGS,
    "ValidatingAdmissionPolicy": r.VALIDATING_ADMISSION_POLICIES,
    "ValidatingAdmissionPolicyBinding": r.VALIDATING_ADMISSION_POLICY_BINDINGS,
}


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    objects: list[Obj]

    def of(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind]


def render(
    chart_helm: Helm,
    *,
    release: str,
    namespace: str,
    labels: Mapping[str, str],
    kube_version: str,
    values: Mapping[str, Any] | None = None,
    files: Sequence[Path] = (),
) -> Release:
    """Render with the test's labels and extra ``values`` (a nested mapping). A release name
    longer than Helm's 53 characters keeps its unique 6-hex suffix."""
    if len(release) > MAX_RELEASE:
        release = f"lccm-{release[-6:]}"
    doc = {"labels": dict(labels), **(values or {})}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="values-") as f:
        yaml.safe_dump(doc, f)
        f.flush()
        text = chart_helm.template(
            release=release,
            namespace=namespace,
            kube_version=kube_version,
            values=[*files, Path(f.name)],
        )
    return Release(release, namespace, parse(text))


def apply_identity(
    cp: ControlPlane, track: Tracker, rel: Release, kinds: Iterable[str] = IDENTITY_KINDS
) -> list[Obj]:
    """Apply the release's ServiceAccounts, RBAC and admission policy for real."""
    chosen = [o for o in rel.objects if o["kind"] in set(kinds)]
    for obj in chosen:
        res = RESOURCES[obj["kind"]]
        ns = (obj["metadata"].get("namespace") or rel.namespace) if res.namespaced else None
        if not res.namespaced or ns != rel.namespace:
            track(res, obj["metadata"]["name"], ns)
    failures = apply_all(cp.http, chosen, namespace=rel.namespace, dry_run=False)
    assert not failures, describe_failures(failures)
    return chosen


def bound_pod(
    kube: Client, *, namespace: str, name: str, service_account: str, node: str,
    labels: Mapping[str, str],
) -> str:  # fmt: skip
    """A Pod on ``node`` for ``service_account`` that nothing runs: its TokenRequest token
    carries the node-name claim, as a kubelet-started Pod's token does."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "nodeName": node,
            "serviceAccountName": service_account,
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "local-ccm.invalid/test:0"}],
        },
    }
    kube.create(r.PODS, body, namespace=namespace)
    return name

"""Every rendered object of every render set against the real schemas (spec/deploy.md D04;
TESTING.md §6 items 3 and 4): the offline kubernetes-validate check, then server-side apply
with dryRun=All and fieldValidation=Strict, with no error and no Warning header."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest

from local_ccm.kube import resources as r
from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import NotFound
from tests.integration.deploy.release import render
from tests.integration.deploy.test_d01_d03_render import RENDER_SETS
from tests.support.chart import Helm, apply_all, describe_failures
from tests.support.controlplane import ControlPlane
from tests.support.crds import wait_established

OFFLINE_SCHEMA_VERSION = kubernetes_validate.latest_version()
CUSTOM_KINDS = {"PodMonitor"}
# A stand-in for prometheus-operator's CRD: the kind exists, any spec is accepted.
PODMONITOR_CRD: Obj = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podmonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "names": {"kind": "PodMonitor", "listKind": "PodMonitorList", "plural": "podmonitors",
                  "singular": "podmonitor"},
        "scope": "Namespaced",
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True}},
            }},
        }],
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def podmonitor_crd(control_plane: ControlPlane) -> None:
    with Client.from_kubeconfig(control_plane.admin_kubeconfig, field_manager="t") as kube:
        try:
            kube.get(r.CUSTOM_RESOURCE_DEFINITIONS, PODMONITOR_CRD["metadata"]["name"])
        except NotFound:
            kube.create(r.CUSTOM_RESOURCE_DEFINITIONS, PODMONITOR_CRD)
        wait_established(kube, PODMONITOR_CRD)


@pytest.mark.parametrize("name", sorted(RENDER_SETS))
def test_d04_offline_schema_check_strict(chart_helm: Helm, kube_version: str, name: str) -> None:
    rel = render(chart_helm, release="local-ccm", namespace="kube-system", labels={},
                 kube_version=kube_version, files=RENDER_SETS[name])  # fmt: skip
    problems = []
    for obj in rel.objects:
        if obj["kind"] in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, OFFLINE_SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            problems.append(f"{obj['kind']}/{obj['metadata']['name']}: {err.message}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", sorted(RENDER_SETS))
def test_d04_server_side_dry_run_of_every_object(
    *,
    control_plane: ControlPlane, crds: list[Obj], podmonitor_crd: None, chart_helm: Helm,
    kube_version: str, unique_name: str, test_namespace: str, name: str,
) -> None:  # fmt: skip
    files: list[Path] = RENDER_SETS[name]
    rel = render(chart_helm, release=unique_name, namespace=test_namespace, labels={},
                 kube_version=kube_version, files=files)  # fmt: skip
    assert rel.objects
    failures = apply_all(control_plane.http, rel.objects, namespace=test_namespace, dry_run=True)
    assert not failures, describe_failures(failures)

"""Every rendered object of every render set against the real schemas (D04): the
offline kubernetes-validate check, then server-side apply
with dryRun=All and fieldValidation=Strict, with no error and no Warning header.

Both run at the newest pinned Kubernetes and at the admission policy's oldest (test ids
carry the version): the chart is rendered for, and its CRDs applied to, each plane. Below
Kubernetes 1.31 the ClusterCIDR CRD is refused (IPAM needs 1.31: the CRD's CEL rules use the
CIDR library, new in 1.31), so the chart refuses to render IPAM there (D03): at 1.30 the render sets
are sent without IPAM, and a separate test asserts the apiserver's refusal of the CRD."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import NotFound
from tests.integration.deploy.conftest import at_both_versions, ipam_renders_at
from tests.integration.deploy.release import render
from tests.integration.deploy.test_d01_d03_render import RENDER_SETS
from tests.support import resources as r
from tests.support.chart import Helm, apply_all, describe_failures
from tests.support.controlplane import ControlPlane
from tests.support.crds import CRD_FILES, POOL_CRD, install, load_crds, wait_established

OFFLINE_SCHEMA_VERSION = kubernetes_validate.latest_version()
CLUSTER_CIDR_CRD = "clustercidrs.networking.x-k8s.io"
CUSTOM_KINDS = {"PodMonitor", "LoadBalancerIPPool"}
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


control_plane, kube_version = at_both_versions()


@pytest.fixture(scope="module")
def cidr_library(kube_version: str) -> bool:
    """Whether the plane accepts the ClusterCIDR CRD's rules (Kubernetes >= 1.31)."""
    return ipam_renders_at(kube_version)


@pytest.fixture(scope="module")
def crds(control_plane: ControlPlane, cidr_library: bool) -> Iterator[list[Obj]]:
    """The chart's CRDs on this module's plane (the session fixture serves only the newest);
    below 1.31 only the pool CRD (1.30 refuses ClusterCIDR's)."""
    with Client.from_kubeconfig(control_plane.admin_kubeconfig, field_manager="t") as kube:
        yield install(kube, CRD_FILES if cidr_library else (POOL_CRD,))


@pytest.fixture(scope="module")
def podmonitor_crd(control_plane: ControlPlane) -> None:
    with Client.from_kubeconfig(control_plane.admin_kubeconfig, field_manager="t") as kube:
        try:
            kube.get(r.CUSTOM_RESOURCE_DEFINITIONS, PODMONITOR_CRD["metadata"]["name"])
        except NotFound:
            kube.create(r.CUSTOM_RESOURCE_DEFINITIONS, PODMONITOR_CRD)
        wait_established(kube, PODMONITOR_CRD)


@pytest.mark.parametrize("name", sorted(RENDER_SETS))
def test_d04_offline_schema_check_strict(
    chart_helm: Helm, kube_version: str, cidr_library: bool, name: str
) -> None:
    if _nothing_below_1_31(chart_helm, kube_version, name, cidr_library):
        return
    rel = render(chart_helm, release="local-ccm", namespace="kube-system", labels={},
                 kube_version=kube_version, files=RENDER_SETS[name],
                 values=_ipam_off_below_1_31(cidr_library))  # fmt: skip
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
    kube_version: str, unique_name: str, test_namespace: str, name: str, cidr_library: bool,
) -> None:  # fmt: skip
    files: list[Path] = RENDER_SETS[name]
    if _nothing_below_1_31(chart_helm, kube_version, name, cidr_library):
        return
    rel = render(chart_helm, release=unique_name, namespace=test_namespace, labels={},
                 kube_version=kube_version, files=files,
                 values=_ipam_off_below_1_31(cidr_library))  # fmt: skip
    assert rel.objects, name
    failures = apply_all(control_plane.http, rel.objects, namespace=test_namespace, dry_run=True)
    assert not failures, describe_failures(failures)


def test_d04_the_clustercidr_crd_is_refused_below_1_31(
    control_plane: ControlPlane, cidr_library: bool
) -> None:
    """Why the chart refuses IPAM below 1.31 (its D03 case): the real apiserver's verdict on
    the shipped CRD — created for real at 1.31+ (the `crds` fixture), refused at 1.30."""
    shipped = [c for path in CRD_FILES for c in load_crds(path)]
    (crd,) = [c for c in shipped if c["metadata"]["name"] == CLUSTER_CIDR_CRD]
    failures = apply_all(control_plane.http, [crd], namespace="default", dry_run=True)
    if cidr_library:
        assert not failures, describe_failures(failures)
        return
    ((_, result),) = failures
    assert result.status == 422, describe_failures(failures)
    assert "undeclared reference to 'isCIDR'" in str(result.body.get("message"))


def _nothing_below_1_31(chart_helm: Helm, kube_version: str, name: str, library: bool) -> bool:
    """An IPAM-only set holds nothing but IPAM, which the chart refuses below 1.31: there its
    render fails saying so (and a release of nothing would be refused as well)."""
    if (name, library) != ("ipam-only", False):
        return False
    result = chart_helm.template_result(kube_version=kube_version, values=RENDER_SETS[name])
    assert result.code != 0
    assert "nodeIpamController requires Kubernetes >= 1.31" in result.output, result.output
    return True


def _ipam_off_below_1_31(cidr_library: bool) -> dict[str, Any]:
    """Render sets enabling IPAM render without it where the chart refuses it (below 1.31)."""
    return {} if cidr_library else {"nodeIpamController": {"enabled": False}}

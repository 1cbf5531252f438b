"""Each controller of the kit declares the RBAC it needs (`runtime.controller.Permission`); the
chart's ClusterRole for it must grant exactly that, read from the template itself: what the
declaration names beyond it is granted elsewhere to every controller of the manager (the Node
watch: the lifecycle controller's ClusterRole; Events about cluster-scoped objects: its events
Role in `default`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from local_ccm.bmc import run as bmc
from local_ccm.bmc.options import Settings as BmcSettings
from local_ccm.csr import run as csr
from local_ccm.csr.options import Settings as CsrSettings
from local_ccm.ipam import run as ipam
from local_ccm.lbipam import run as lbipam
from local_ccm.lbipam.options import Settings as LbSettings
from local_ccm.lifecycle import run as lifecycle
from local_ccm.runtime.controller import Permission

TEMPLATES = Path(__file__).resolve().parents[2] / "charts" / "local-ccm" / "templates"
Atom = tuple[str, str, str, str]  # group, resource, verb, name ("" for any)


def documents(template: str) -> list[dict[str, Any]]:
    """The template's documents with every line that holds a template action dropped (the
    rules of these templates are plain YAML; a conditional rule is kept)."""
    text = (TEMPLATES / template).read_text()
    plain = "\n".join(line for line in text.splitlines() if "{{" not in line)
    return [doc for doc in yaml.safe_load_all(plain) if doc]


def rules(template: str, kind: str) -> set[Atom]:
    found: set[Atom] = set()
    for doc in documents(template):
        if doc["kind"] != kind:
            continue
        for rule in doc["rules"]:
            names = rule.get("resourceNames", [""])
            found |= {(group, resource, verb, name)
                      for group in rule["apiGroups"] for resource in rule["resources"]
                      for verb in rule["verbs"] for name in names}  # fmt: skip
    return found


def atoms(permissions: Iterable[Permission]) -> set[Atom]:
    return {(p.group, p.resource, verb, name)
            for p in permissions for verb in p.verbs for name in p.names or ("",)}  # fmt: skip


SHARED = rules("nlc-clusterrole.yaml", "ClusterRole")  # the manager's Node watch among them
EVENTS_ROLE = rules("nlc-events-role.yaml", "Role")
CASES = {
    "kubelet-serving-approver": ("csr-clusterrole.yaml", csr.permissions(CsrSettings())),
    "service-lb-ipam": ("lb-clusterrole.yaml", lbipam.permissions(LbSettings())),
    "node-lifecycle": (
        "nlc-clusterrole.yaml",
        lifecycle.permissions(
            event_namespace="default", out_of_service=True, bmc=True, fencing=True
        ),
    ),
    "node-ipam": ("ipam-clusterrole.yaml", ipam.permissions(event_namespace="default")),
    "node-bmc": ("bmc-clusterrole.yaml", bmc.permissions(BmcSettings())),
}
# The reviews behind --metrics-secure, which the start-up check does not ask (docs/design.md).
METRICS_REVIEWS = {("authentication.k8s.io", "tokenreviews", "create", ""),
                   ("authorization.k8s.io", "subjectaccessreviews", "create", "")}  # fmt: skip
# Granted beyond the declaration: Event series updates (the API server's EventRecorder
# semantics; this project's outbox only creates); a watch of VolumeAttachments the lifecycle
# controller never opens (it lists them), granted since the first chart.
EXTRA = {
    "service-lb-ipam": {("", "events", "patch", "")},
    "node-lifecycle": {*METRICS_REVIEWS, ("storage.k8s.io", "volumeattachments", "watch", "")},
    "node-ipam": METRICS_REVIEWS,
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_charts_cluster_role_grants_exactly_what_the_controller_declares(name: str) -> None:
    template, declared = CASES[name]
    own = rules(template, "ClusterRole") - EXTRA.get(name, set())
    wanted = atoms(p for p in declared if p.namespace is None)
    assert own - wanted == set(), "granted but not needed"
    assert wanted - own - SHARED == set(), "needed but granted nowhere"


@pytest.mark.parametrize("name", list(CASES))
def test_events_in_the_event_namespace_are_the_events_roles(name: str) -> None:
    declared = CASES[name][1]
    wanted = atoms(p for p in declared if p.namespace == "default")
    assert wanted <= EVENTS_ROLE


def test_the_kube_vip_configmap_is_read_through_a_role_in_its_namespace() -> None:
    settings = LbSettings(kubevip=("kube-system", "kubevip"))
    [configmap] = [p for p in lbipam.permissions(settings) if p.resource == "configmaps"]
    assert (configmap.namespace, configmap.names) == ("kube-system", ("kubevip",))
    role = {(g, r, v) for g, r, v, _ in rules("lb-clusterrole.yaml", "Role")}
    assert {(g, r, v) for g, r, v, _ in atoms([configmap])} == role


def test_node_bmc_gets_secrets_by_name_in_its_credentials_namespace_only() -> None:
    settings = BmcSettings(credentials_namespace="bmc-creds")
    [secrets] = [p for p in bmc.permissions(settings) if p.resource == "secrets"]
    assert (secrets.namespace, secrets.verbs, secrets.names) == ("bmc-creds", ("get",), ())
    assert rules("bmc-clusterrole.yaml", "Role") == atoms([secrets])  # no list, no watch
    cluster_wide = rules("bmc-clusterrole.yaml", "ClusterRole")
    assert not {atom for atom in cluster_wide if atom[1] == "secrets"}

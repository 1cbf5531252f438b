"""The chart's RBAC and admission policy applied for real (D09, D10):
SubjectAccessReview for the permission matrix, and the agent's pod-bound
token against the ValidatingAdmissionPolicy.

Every test runs at the newest pinned Kubernetes and at the admission policy's oldest (test
ids carry the version): the chart is rendered for, and applied to, each plane."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from string import Template
from typing import Any

import pytest
import yaml

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import Forbidden, Invalid
from tests.integration.deploy.conftest import at_both_versions, ipam_renders_at
from tests.integration.deploy.release import Release, apply_identity, bound_pod, render
from tests.support import names
from tests.support import resources as r
from tests.support.chart import IPAM_MINIMUM_KUBE_VERSION, Helm
from tests.support.cleanup import NodeFactory, Tracker
from tests.support.controlplane import ControlPlane
from tests.support.waiting import eventually

RBAC_FILES = Path(__file__).resolve().parents[2] / "support" / "rbac"
UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
NOT_READY = "node.kubernetes.io/not-ready"
OWNED = "local-ccm.io/owned-addresses"
V1 = "local-ccm agent may only modify the Node it runs on"
V2 = "local-ccm agent may not change labels"
V3 = "local-ccm agent may only write its ownership annotation"
V5 = "local-ccm agent may only remove the uninitialized taint"
V8_V9 = "local-ccm agent may only change addresses and its condition"
Check = tuple[str, str, str | None, str | None, str | None]  # verb, resource, sub, ns, name


control_plane, kube_version = at_both_versions()


@pytest.fixture(scope="module")
def ipam_kube_version(kube_version: str) -> str:
    """Renders with node-ipam-controller: the chart refuses IPAM below 1.31 (D03), so on the
    1.30 plane they are rendered for 1.31. Only the RBAC objects and workloads of such a render
    are judged there (by SubjectAccessReview), which do not depend on the version."""
    return kube_version if ipam_renders_at(kube_version) else IPAM_MINIMUM_KUBE_VERSION


def _sa(ns: str, name: str) -> tuple[str, list[str]]:
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]
    return f"system:serviceaccount:{ns}:{name}", groups


def allowed(kube: Client, user: tuple[str, list[str]], check: Check) -> bool:
    verb, resource, sub, ns, name = check
    group, _, plural = resource.rpartition("/")
    attrs: dict[str, Any] = {"verb": verb, "group": group, "resource": plural}
    attrs.update({k: v for k, v in (("subresource", sub), ("namespace", ns), ("name", name)) if v})
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user[0], "groups": user[1], "resourceAttributes": attrs},
    }
    return bool(kube.create(r.SUBJECT_ACCESS_REVIEWS, body)["status"].get("allowed"))


def matrix(kube: Client, user: tuple[str, list[str]], checks: Sequence[Check]) -> dict[Check, bool]:
    return {c: allowed(kube, user, c) for c in checks}


def sa_name(rel: Release, component: str) -> str:
    for w in rel.objects:
        if w["kind"] in ("DaemonSet", "Deployment"):
            labels = w["spec"]["template"]["metadata"]["labels"]
            if labels["app.kubernetes.io/component"] == component:
                return str(w["spec"]["template"]["spec"]["serviceAccountName"])
    raise AssertionError(component)


@pytest.fixture
def full_release(
    *,
    control_plane: ControlPlane, chart_helm: Helm, track: Tracker, unique_name: str,
    test_namespace: str, test_labels: dict[str, str], ipam_kube_version: str,
) -> Release:  # fmt: skip
    values = {"nodeIpamController": {"enabled": True}}
    rel = render(chart_helm, release=unique_name, namespace=test_namespace, labels=test_labels,
                 kube_version=ipam_kube_version, values=values)  # fmt: skip
    apply_identity(control_plane, track, rel)
    return rel


# ------------------------------------------------------------------ D09
def test_d09_rbac_is_minimal_and_sufficient_per_component(
    kube: Client, full_release: Release, test_namespace: str
) -> None:
    ns = test_namespace
    agent = _sa(ns, sa_name(full_release, "agent"))
    nlc = _sa(ns, sa_name(full_release, "node-lifecycle-controller"))
    ipam = _sa(ns, sa_name(full_release, "node-ipam-controller"))
    cc = "networking.x-k8s.io/clustercidrs"
    lease = "coordination.k8s.io/leases"
    expected: list[tuple[tuple[str, list[str]], Check, bool]] = [
        # agent
        (agent, ("list", "nodes", None, None, None), True),
        (agent, ("watch", "nodes", None, None, None), True),
        (agent, ("patch", "nodes", None, None, "n"), True),
        (agent, ("patch", "nodes", "status", None, "n"), True),
        (agent, ("create", "events", None, "default", None), True),
        (agent, ("delete", "nodes", None, None, "n"), False),
        (agent, ("update", "nodes", None, None, "n"), False),
        (agent, ("create", "nodes", None, None, None), False),
        (agent, ("get", "secrets", None, ns, "s"), False),
        (agent, ("create", "events", None, ns, None), False),
        (agent, ("create", "events", None, "kube-system", None), False),
        (agent, ("get", lease, None, ns, "x"), False),
        (agent, ("create", lease, None, ns, None), False),
        (agent, ("update", lease, None, ns, "x"), False),
        # node-lifecycle-controller
        (nlc, ("delete", "nodes", None, None, "n"), True),
        (nlc, ("watch", "nodes", None, None, None), True),
        (nlc, ("create", lease, None, ns, None), True),
        (nlc, ("get", lease, None, ns, "node-lifecycle-controller"), True),
        (nlc, ("update", lease, None, ns, "node-lifecycle-controller"), True),
        (nlc, ("create", "events", None, "default", None), True),
        (nlc, ("patch", "events", None, "default", "e"), True),
        (nlc, ("patch", "nodes", "status", None, "n"), False),
        (nlc, ("update", "nodes", None, None, "n"), False),
        (nlc, ("patch", "nodes", None, None, "n"), False),
        (nlc, ("list", "storage.k8s.io/volumeattachments", None, None, None), False),
        (nlc, ("create", lease, None, "default", None), False),
        (nlc, ("update", lease, None, "default", "node-lifecycle-controller"), False),
        (nlc, ("update", lease, None, ns, "another-lease"), False),
        # node-ipam-controller
        (ipam, ("patch", "nodes", None, None, "n"), True),
        (ipam, ("watch", cc, None, None, None), True),
        (ipam, ("patch", cc, None, None, "c"), True),
        (ipam, ("patch", cc, "status", None, "c"), True),
        (ipam, ("update", lease, None, ns, "node-ipam-controller"), True),
        (ipam, ("delete", "nodes", None, None, "n"), False),
        (ipam, ("delete", cc, None, None, "c"), False),
        (ipam, ("create", cc, None, None, None), False),
        (ipam, ("update", "nodes", None, None, "n"), False),
        (ipam, ("patch", "nodes", "status", None, "n"), False),
        (ipam, ("update", lease, None, ns, "another-lease"), False),
    ]
    wrong = [(u[0], c, want) for u, c, want in expected if allowed(kube, u, c) != want]
    assert not wrong, "SubjectAccessReview disagrees (user, check, expected):\n" + "\n".join(
        map(str, wrong)
    )


def test_d09_out_of_service_taint_adds_exactly_its_rbac(
    *,
    control_plane: ControlPlane, kube: Client, chart_helm: Helm, track: Tracker,
    unique_name: str, test_namespace: str, test_labels: dict[str, str], kube_version: str,
) -> None:  # fmt: skip
    values = {"nodeLifecycleController": {"controller": {"outOfServiceTaint": True}}}
    rel = render(chart_helm, release=unique_name, namespace=test_namespace, labels=test_labels,
                 kube_version=kube_version, values=values)  # fmt: skip
    apply_identity(control_plane, track, rel)
    nlc = _sa(test_namespace, sa_name(rel, "node-lifecycle-controller"))
    got = matrix(kube, nlc, [
        ("patch", "nodes", None, None, "n"),
        ("list", "storage.k8s.io/volumeattachments", None, None, None),
        ("watch", "storage.k8s.io/volumeattachments", None, None, None),
        ("patch", "nodes", "status", None, "n"),
        ("update", "nodes", None, None, "n"),
    ])  # fmt: skip
    assert list(got.values()) == [True, True, True, False, False], got


def _reference_rules(component: str, lease: str) -> dict[str, list[Obj]]:
    """Rules of tests/support/rbac/<component>.yaml (what the controller checks at start-up),
    by kind; the out-of-service documents are left out (default values)."""
    text = Template((RBAC_FILES / f"{component}.yaml").read_text()).safe_substitute(
        NAME="x", NAMESPACE="ns", LEASE_NAME=lease, EVENT_NAMESPACE="default"
    )
    by_kind: dict[str, list[Obj]] = {}
    for doc in yaml.safe_load_all(text):
        annotations = (doc.get("metadata") or {}).get("annotations") or {}
        if doc.get("rules") is not None and "local-ccm.io/only-with" not in annotations:
            by_kind.setdefault(doc["kind"], []).extend(doc["rules"])
    return by_kind


def _rendered_rules(rel: Release, component: str) -> dict[str, list[Obj]]:
    by_kind: dict[str, list[Obj]] = {}
    for obj in rel.objects:
        labels = obj["metadata"].get("labels") or {}
        if obj.get("rules") is not None and labels.get("app.kubernetes.io/component") == component:
            by_kind.setdefault(obj["kind"], []).extend(obj["rules"])
    return by_kind


@pytest.mark.parametrize(
    ("component", "reference", "lease"),
    [
        ("node-lifecycle-controller", "lifecycle", "node-lifecycle-controller"),
        ("node-ipam-controller", "ipam", "node-ipam-controller"),
    ],
)
def test_d09_controller_rbac_equals_what_the_controller_checks(
    chart_helm: Helm, ipam_kube_version: str, component: str, reference: str, lease: str
) -> None:
    rel = render(chart_helm, release="r", namespace="ns", labels={}, kube_version=ipam_kube_version,
                 values={"nodeIpamController": {"enabled": True}})  # fmt: skip
    assert _canonical(_rendered_rules(rel, component)) == _canonical(
        _reference_rules(reference, lease)
    )


def _canonical(by_kind: dict[str, list[Obj]]) -> dict[str, list[str]]:
    """Rules as sorted JSON per kind: order of rules and verbs carries no meaning."""
    out = {}
    for kind, rules in by_kind.items():
        norm = [{k: sorted(v) for k, v in rule.items()} for rule in rules]
        out[kind] = sorted(json.dumps(n, sort_keys=True) for n in norm)
    return out


# ------------------------------------------------------------------ D10
class AgentCase:
    """Node A (the agent's) and Node B, the agent's clients, and the admin client."""

    def __init__(self, kube: Client, agent: Client, unbound: Client, a: str, b: str) -> None:
        self.kube, self.agent, self.unbound, self.a, self.b = kube, agent, unbound, a, b


def _denied(call: Callable[[], Obj], message: str) -> str:
    with pytest.raises(Forbidden) as err:
        call()
    assert err.value.status == 403
    assert message in err.value.message, err.value.message
    return err.value.message


def _status_patch(reason: str = "AddressesSynced") -> Obj:
    return {
        "metadata": {"annotations": {OWNED: "InternalIP=203.0.113.10"}},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "203.0.113.10"}],
            "conditions": [{
                "type": "LocalCCMAddressesSynced", "status": "True", "reason": reason,
                "message": "test", "lastTransitionTime": "2026-01-01T00:00:00Z",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            }],
        },
    }  # fmt: skip


def _taint_patch(node: Obj, keep: Callable[[Obj], bool], extra: Sequence[Obj] = ()) -> list[Obj]:
    taints = [t for t in node["spec"].get("taints", []) if keep(t)] + list(extra)
    rv = node["metadata"]["resourceVersion"]
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "replace", "path": "/spec/taints", "value": taints},
    ]


@pytest.fixture
def agent_case(
    *,
    control_plane: ControlPlane, kube: Client, chart_helm: Helm, track: Tracker,
    make_node: NodeFactory, unique_name: str, test_namespace: str,
    test_labels: dict[str, str], kube_version: str, request: pytest.FixtureRequest,
) -> Iterator[AgentCase]:  # fmt: skip
    rel = render(chart_helm, release=unique_name, namespace=test_namespace, labels=test_labels,
                 kube_version=kube_version)  # fmt: skip
    apply_identity(control_plane, track, rel)
    sa = sa_name(rel, "agent")
    not_ready = {"key": NOT_READY, "effect": "NoSchedule"}
    # Named without the plane's test id, so `system:node:<A>` stays a valid 64-character CN.
    a_name = names.unique_name(request.node.originalname, secrets.token_hex(3))
    a = make_node(name=a_name, uninitialized=True, taints=[not_ready])["metadata"]["name"]
    b = make_node(uninitialized=True)["metadata"]["name"]
    pod = bound_pod(kube, namespace=test_namespace, name=f"{unique_name[:50]}-a",
                    service_account=sa, node=a, labels=test_labels)  # fmt: skip
    agent = Client.from_kubeconfig(
        control_plane.token_kubeconfig(sa, test_namespace, bound_pod=pod), field_manager="t"
    )
    unbound = Client.from_kubeconfig(
        control_plane.token_kubeconfig(sa, test_namespace), field_manager="t"
    )
    case = AgentCase(kube, agent, unbound, a, b)

    def policy_active() -> bool:
        try:
            agent.patch(r.NODES, b, {"metadata": {"annotations": {OWNED: "x"}}},
                        patch_type="merge", dry_run=True)  # fmt: skip
        except Forbidden as exc:
            return V1 in exc.message
        return False

    try:
        eventually(policy_active, timeout=15, interval=0.2, message="the policy denies node B")
        yield case
    finally:
        agent.close()
        unbound.close()


def test_d10_agent_may_write_only_its_own_node_status(agent_case: AgentCase) -> None:
    c = agent_case
    done = c.agent.patch(r.NODES, c.a, _status_patch(), patch_type="strategic",
                         subresource="status")  # fmt: skip
    assert done["metadata"]["annotations"][OWNED] == "InternalIP=203.0.113.10"
    types = [x["type"] for x in done["status"]["conditions"]]
    assert {"LocalCCMAddressesSynced", "Ready"} <= set(types), types
    _denied(lambda: c.agent.patch(r.NODES, c.b, _status_patch(), patch_type="strategic",
                                  subresource="status"), V1)  # fmt: skip
    _denied(lambda: c.unbound.patch(r.NODES, c.a, _status_patch(), patch_type="strategic",
                                    subresource="status"), V1)  # fmt: skip
    _denied(lambda: c.unbound.patch(r.NODES, c.a, {"spec": {"providerID": "local://a"}},
                                    patch_type="merge"), V1)  # fmt: skip


def test_d10_agent_may_only_remove_the_uninitialized_taint(agent_case: AgentCase) -> None:
    c = agent_case
    node = c.kube.get(r.NODES, c.a)
    no_not_ready = _taint_patch(node, lambda t: t["key"] != NOT_READY)
    _denied(lambda: c.agent.patch(r.NODES, c.a, no_not_ready), V5)
    extra = _taint_patch(node, lambda t: True, [{"key": "x.example/other", "effect": "NoSchedule"}])
    _denied(lambda: c.agent.patch(r.NODES, c.a, extra), V5)
    done = c.agent.patch(r.NODES, c.a, _taint_patch(node, lambda t: t["key"] != UNINITIALIZED))
    assert [t["key"] for t in done["spec"]["taints"]] == [NOT_READY]
    on_b = _taint_patch(c.kube.get(r.NODES, c.b), lambda t: t["key"] != UNINITIALIZED)
    _denied(lambda: c.agent.patch(r.NODES, c.b, on_b), V1)


def test_d10_agent_may_set_provider_id_once_and_no_labels_or_other_annotations(
    agent_case: AgentCase,
) -> None:
    c = agent_case
    done = c.agent.patch(r.NODES, c.a, {"spec": {"providerID": "local://a"}}, patch_type="merge")
    assert done["spec"]["providerID"] == "local://a"
    # The apiserver's own validation (422) or V6 (403): never accepted.
    with pytest.raises((Forbidden, Invalid)):
        c.agent.patch(r.NODES, c.a, {"spec": {"providerID": "local://b"}}, patch_type="merge")
    _denied(lambda: c.agent.patch(r.NODES, c.a, {"metadata": {"labels": {"x.example/l": "1"}}},
                                  patch_type="merge"), V2)  # fmt: skip
    other = {"metadata": {"annotations": {"x.example/a": "1"}}}
    _denied(lambda: c.agent.patch(r.NODES, c.a, other, patch_type="merge"), V3)
    _denied(lambda: c.agent.patch(r.NODES, c.a, other, patch_type="merge",
                                  subresource="status"), V3)  # fmt: skip


def test_d10_agent_may_not_touch_kubelet_status(agent_case: AgentCase) -> None:
    c = agent_case
    ready = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "X"}]}}
    _denied(lambda: c.agent.patch(r.NODES, c.a, ready, patch_type="strategic",
                                  subresource="status"), V8_V9)  # fmt: skip
    capacity = {"status": {"capacity": {"pods": "7"}}}
    _denied(lambda: c.agent.patch(r.NODES, c.a, capacity, patch_type="strategic",
                                  subresource="status"), V8_V9)  # fmt: skip


def test_d10_admin_and_kubelet_are_unaffected(
    agent_case: AgentCase, control_plane: ControlPlane
) -> None:
    c = agent_case
    label = {"metadata": {"labels": {"x.example/admin": "1"}}}
    c.kube.patch(r.NODES, c.b, label, patch_type="merge")
    c.kube.patch(r.NODES, c.a, {"spec": {"taints": []}}, patch_type="merge")
    kubeconfig = control_plane.user_kubeconfig(f"system:node:{c.a}", ["system:nodes"])
    with Client.from_kubeconfig(kubeconfig, field_manager="kubelet") as kubelet:
        ready = {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}
        kubelet.patch(r.NODES, c.a, {"status": {"conditions": [ready]}}, patch_type="strategic",
                      subresource="status")  # fmt: skip


def _big_status(n_images: int, n_conditions: int) -> Obj:
    images = [
        {"names": [f"registry.example/img{i}@sha256:{i:064x}", f"registry.example/img{i}:v{i}"],
         "sizeBytes": 1000 + i}
        for i in range(n_images)
    ]  # fmt: skip
    conditions = [
        {"type": f"Example{i}", "status": "False", "reason": "Fine", "message": "m" * 40,
         "lastTransitionTime": "2026-01-01T00:00:00Z", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}
        for i in range(n_conditions - 1)
    ]  # fmt: skip
    return {"status": {"images": images, "conditions": conditions}}


def test_d10_status_patch_of_a_large_node_stays_within_the_cel_cost_budget(
    agent_case: AgentCase,
) -> None:
    c = agent_case
    c.kube.patch(r.NODES, c.a, _big_status(100, 30), patch_type="strategic", subresource="status")
    node = c.kube.get(r.NODES, c.a)
    assert len(node["status"]["images"]) == 100
    assert len(node["status"]["conditions"]) >= 30
    done = c.agent.patch(r.NODES, c.a, _status_patch(), patch_type="strategic",
                         subresource="status")  # fmt: skip
    assert done["metadata"]["annotations"][OWNED] == "InternalIP=203.0.113.10"
    # and a denial is still a policy denial, not a cost-limit error
    message = _denied(
        lambda: c.agent.patch(
            r.NODES,
            c.a,
            {"status": {"capacity": {"pods": "7"}}},
            patch_type="strategic",
            subresource="status",
        ),
        V8_V9,
    )
    assert "cost" not in message.lower(), message


def test_d10_warn_audit_actions_do_not_deny(
    *,
    control_plane: ControlPlane, kube: Client, chart_helm: Helm, track: Tracker,
    make_node: NodeFactory, unique_name: str, test_namespace: str,
    test_labels: dict[str, str], kube_version: str,
) -> None:  # fmt: skip
    values = {"admissionPolicy": {"validationActions": ["Warn", "Audit"]}}
    rel = render(chart_helm, release=unique_name, namespace=test_namespace, labels=test_labels,
                 kube_version=kube_version, values=values)  # fmt: skip
    (binding,) = rel.of("ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["validationActions"] == ["Warn", "Audit"]
    apply_identity(control_plane, track, rel)
    sa = sa_name(rel, "agent")
    a = make_node()["metadata"]["name"]
    b = make_node()["metadata"]["name"]
    pod = bound_pod(kube, namespace=test_namespace, name=f"{unique_name[:50]}-a",
                    service_account=sa, node=a, labels=test_labels)  # fmt: skip
    kubeconfig = control_plane.token_kubeconfig(sa, test_namespace, bound_pod=pod)
    with Client.from_kubeconfig(kubeconfig, field_manager="t") as agent:
        done = agent.patch(r.NODES, b, _status_patch(), patch_type="strategic",
                           subresource="status")  # fmt: skip
    assert done["metadata"]["annotations"][OWNED] == "InternalIP=203.0.113.10"


# ------------------------------------------------------------------ M06
ZONE = "topology.kubernetes.io/zone"


def test_m06_agent_may_change_only_metadata_label_keys_and_only_on_its_own_node(
    agent_case: AgentCase,
) -> None:
    c = agent_case
    ours = {ZONE: "rack-a", "local-ccm.io/rack": "a", "hw.local-ccm.io/gpu": "none",
            "node.kubernetes.io/instance-type": "PowerEdge-R650"}  # fmt: skip
    record = {"local-ccm.io/owned-labels": json.dumps(ours, sort_keys=True)}
    done = c.agent.patch(r.NODES, c.a, {"metadata": {"labels": ours, "annotations": record}},
                         patch_type="merge")  # fmt: skip
    assert ours.items() <= done["metadata"]["labels"].items()
    assert (
        done["metadata"]["annotations"]["local-ccm.io/owned-labels"]
        == record["local-ccm.io/owned-labels"]
    )
    # and may change or remove them again
    again = {"metadata": {"labels": {ZONE: "rack-b", "local-ccm.io/rack": None}}}
    c.agent.patch(r.NODES, c.a, again, patch_type="merge")
    # another Node's metadata labels
    _denied(lambda: c.agent.patch(r.NODES, c.b, {"metadata": {"labels": {ZONE: "x"}}},
                                  patch_type="merge"), V1)  # fmt: skip
    # keys outside the allowed set, including look-alikes of the allowed domain
    for key in (
        "x.example/l",
        "notlocal-ccm.io/x",
        "local-ccm.io.example/x",
        "kubernetes.io/os",
        "node-role.kubernetes.io/control-plane",
        "beta.kubernetes.io/instance-type",
    ):
        label = {"metadata": {"labels": {key: "1"}}}
        _denied(partial(c.agent.patch, r.NODES, c.a, label, patch_type="merge"), V2)
    # a label someone else set may not be removed
    c.kube.patch(r.NODES, c.a, {"metadata": {"labels": {"team": "db"}}}, patch_type="merge")
    _denied(lambda: c.agent.patch(r.NODES, c.a, {"metadata": {"labels": {"team": None}}},
                                  patch_type="merge"), V2)  # fmt: skip

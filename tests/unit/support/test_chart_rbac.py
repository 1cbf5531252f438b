"""A component's RBAC from a chart render, adapted for one test (tests/support/chart.py):
renamed and re-namespaced, with the chart's rules untouched."""

from __future__ import annotations

from typing import Any

from tests.support.chart import RbacTarget, ShippedRbac, bound_to_user

Obj = dict[str, Any]
RBAC = "rbac.authorization.k8s.io"
NODES = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
EVENTS = [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
TARGET = RbacTarget("lccm-n1", "local-ccm", "t-ns", {"run": "r1"})


def labelled(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/component": component, "app.kubernetes.io/name": "local-ccm"}


def obj(kind: str, name: str, component: str = "agent", **rest: Any) -> Obj:
    meta: Obj = {"name": name, "labels": labelled(component)}
    if "namespace" in rest:
        meta["namespace"] = rest.pop("namespace")
    version = "v1" if kind in ("ServiceAccount", "DaemonSet") else f"{RBAC}/v1"
    return {"apiVersion": version, "kind": kind, "metadata": meta, **rest}


def binding(kind: str, name: str, role: str, sa: str = "local-ccm", **rest: Any) -> Obj:
    subject = {"kind": "ServiceAccount", "name": sa, "namespace": "kube-system"}
    ref = {"apiGroup": RBAC, "kind": role, "name": name}
    return obj(kind, name, roleRef=ref, subjects=[subject], **rest)


RENDERED = [
    obj("ServiceAccount", "local-ccm"),
    obj("ClusterRole", "local-ccm", rules=NODES),
    binding("ClusterRoleBinding", "local-ccm", "ClusterRole"),
    obj("Role", "local-ccm-events", namespace="default", rules=EVENTS),
    binding("RoleBinding", "local-ccm-events", "Role", namespace="default"),
    obj("ServiceAccount", "local-ccm-node-lifecycle-controller", "node-lifecycle-controller"),
    obj("ClusterRole", "local-ccm-node-lifecycle-controller", "node-lifecycle-controller"),
    obj("DaemonSet", "local-ccm"),
]


def by_kind(objs: list[Obj]) -> dict[str, Obj]:
    return {o["kind"]: o for o in objs}


def test_of_selects_only_the_components_service_account_roles_and_bindings() -> None:
    shipped = ShippedRbac.of(RENDERED, "agent")
    assert [(o["kind"], o["metadata"]["name"]) for o in shipped.objects] == [
        ("ServiceAccount", "local-ccm"),
        ("ClusterRole", "local-ccm"),
        ("ClusterRoleBinding", "local-ccm"),
        ("Role", "local-ccm-events"),
        ("RoleBinding", "local-ccm-events"),
    ]


def test_for_test_renames_the_roles_and_moves_the_service_account_into_the_test_namespace() -> None:
    got = by_kind(ShippedRbac.of(RENDERED, "agent").for_test(TARGET))
    assert got["ServiceAccount"]["metadata"]["namespace"] == "t-ns"
    assert got["ClusterRole"]["metadata"]["name"] == "lccm-n1"
    assert got["ClusterRoleBinding"]["roleRef"]["name"] == "lccm-n1"
    assert got["Role"]["metadata"] == {**got["Role"]["metadata"], "name": "lccm-n1-events",
                                       "namespace": "default"}  # fmt: skip
    assert got["RoleBinding"]["roleRef"] == {"apiGroup": RBAC, "kind": "Role",
                                             "name": "lccm-n1-events"}  # fmt: skip
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert got[kind]["subjects"] == [
            {"kind": "ServiceAccount", "name": "local-ccm", "namespace": "t-ns"}
        ]


def test_for_test_keeps_the_rules_and_adds_the_test_labels_without_changing_the_render() -> None:
    shipped = ShippedRbac.of(RENDERED, "agent")
    got = by_kind(shipped.for_test(TARGET))
    assert got["ClusterRole"]["rules"] == NODES
    assert got["Role"]["rules"] == EVENTS
    assert all(o["metadata"]["labels"] == {**labelled("agent"), "run": "r1"} for o in got.values())
    assert shipped.objects[1]["metadata"] == {"name": "local-ccm", "labels": labelled("agent")}


def test_bound_to_user_drops_the_service_account_and_binds_the_user() -> None:
    got = bound_to_user(ShippedRbac.of(RENDERED, "agent").for_test(TARGET), "bench-user")
    assert [o["kind"] for o in got] == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
    user = {"kind": "User", "name": "bench-user", "apiGroup": RBAC}
    assert [o["subjects"] for o in got if "subjects" in o] == [[user], [user]]

"""Every namespaced object the chart renders names its namespace.

``kubectl apply`` of a render, and Talos' ``cluster.inlineManifests``, have no namespace
default: an object without ``metadata.namespace`` lands in the applier's namespace (usually
``default``, where Pod Security baseline refuses host networking), not in the one given to
``helm template -n``. So every namespaced object carries ``metadata.namespace``: the release
namespace, except the Roles that grant access in another namespace on purpose (Events in
``events.namespace`` and ``default``, the kube-vip ConfigMap's namespace).
Needs only the helm binary, no API server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.chart import DEPLOY, KINDS, Helm, Obj, ci_values, parse, values_set_name

RENDER_SETS: dict[str, list[Path]] = {
    "default": [],
    **{values_set_name(p): [p] for p in ci_values()},
    "static": [DEPLOY / "values" / "static.yaml"],
}
#: kube-system as documented, and a namespace no template could have hard-coded.
RELEASE_NAMESPACES = ("kube-system", "lccm-release")
#: Roles (and their bindings) that grant access in another namespace by design.
ELSEWHERE_SUFFIXES = ("-events", "-kubevip")


def render(chart_helm: Helm, kube_version: str, name: str, namespace: str) -> list[Obj]:
    values = RENDER_SETS[name]
    return parse(chart_helm.template(kube_version=kube_version, namespace=namespace, values=values))


def is_namespaced(obj: Obj) -> bool:
    kind = KINDS.get(obj["kind"])
    assert kind is not None, f"{obj['kind']} is missing from tests/support/chart.py's KINDS"
    return kind.namespaced


def is_placed_elsewhere(obj: Obj) -> bool:
    name: str = obj["metadata"]["name"]
    return obj["kind"] in ("Role", "RoleBinding") and name.endswith(ELSEWHERE_SUFFIXES)


def misplaced(objs: list[Obj], namespace: str) -> list[str]:
    """``kind/name: namespace`` of every namespaced object not where it belongs."""
    wrong = []
    for obj in filter(is_namespaced, objs):
        found = obj["metadata"].get("namespace")
        if not found or (found != namespace and not is_placed_elsewhere(obj)):
            wrong.append(f"{obj['kind']}/{obj['metadata']['name']}: {found}")
    return wrong


@pytest.mark.parametrize("namespace", RELEASE_NAMESPACES)
@pytest.mark.parametrize("name", sorted(RENDER_SETS))
def test_every_namespaced_object_names_the_release_namespace(
    chart_helm: Helm, kube_version: str, name: str, namespace: str
) -> None:
    objs = render(chart_helm, kube_version, name, namespace)
    assert any(map(is_namespaced, objs)), "the render has no namespaced object"
    assert misplaced(objs, namespace) == []


def test_the_roles_placed_elsewhere_name_their_namespace_too(
    chart_helm: Helm, kube_version: str
) -> None:
    objs = render(chart_helm, kube_version, "load-balancer", "lccm-release")
    elsewhere = [o for o in objs if is_placed_elsewhere(o)]
    assert {o["metadata"]["name"].rsplit("-", 1)[1] for o in elsewhere} == {"events", "kubevip"}
    assert all(o["metadata"].get("namespace") not in (None, "lccm-release") for o in elsewhere)

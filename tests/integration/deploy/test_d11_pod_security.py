"""Pods built from the rendered pod templates against Pod Security admission (D11):
server-side dry-run creates in `restricted` and `privileged` namespaces."""

from __future__ import annotations

import re

import pytest

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import Forbidden
from tests.integration.deploy.test_d01_d03_render import RENDER_SETS
from tests.support import resources as r
from tests.support.chart import Helm, component, parse

ENFORCE = "pod-security.kubernetes.io/enforce"
# All three follow from host networking (the agent must reach the API server before the Node
# has addresses): hostNetwork pods declare their ports, so the apiserver defaults hostPort =
# containerPort, and their probes name host 127.0.0.1 (the Pod IP is the Node's address, which
# may not exist yet). The lifecycle controller by default has neither host networking nor raw
# ICMP (datagram sockets as 65532, the safe ping_group_range sysctl): restricted admits it.
HOST = {"host namespaces", "hostPort", "probe or lifecycle host"}
CASES = [
    ("default", "agent", HOST),
    ("default", "node-lifecycle-controller", set()),
    ("nlc-unprivileged", "node-lifecycle-controller", set()),
    ("all-features", "node-ipam-controller", HOST),
]


def violations(message: str) -> set[str]:
    """The check names of 'violates PodSecurity "restricted:latest": a (x), b (y, z)'."""
    assert 'violates PodSecurity "restricted:latest": ' in message, message
    listed = message.split('violates PodSecurity "restricted:latest": ', 1)[1]
    depth, names, current = 0, [], ""
    for ch in listed:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and ch == ",":
            names.append(current)
            current = ""
            continue
        if depth == 0 and ch != ")":
            current += ch
    names.append(current)
    return {re.sub(r"\s+", " ", n).strip() for n in names if n.strip()}


def pod_of(workload: Obj, name: str, namespace: str) -> Obj:
    spec = dict(workload["spec"]["template"]["spec"])
    spec.pop("priorityClassName", None)  # Priority admission is not what this checks
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}  # fmt: skip


def namespace_with(kube: Client, name: str, level: str, labels: dict[str, str]) -> str:
    body = {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {**labels, ENFORCE: level}}}  # fmt: skip
    kube.create(r.NAMESPACES, body)
    return name


@pytest.mark.parametrize(("render_set", "component_name", "expected"), CASES)
def test_d11_restricted_namespace_names_exactly_the_documented_violations(
    *,
    kube: Client, chart_helm: Helm, kube_version: str, unique_name: str,
    test_labels: dict[str, str], render_set: str, component_name: str, expected: set[str],
) -> None:  # fmt: skip
    objs = parse(chart_helm.template(kube_version=kube_version, values=RENDER_SETS[render_set]))
    workload = component(objs, component_name)
    base = f"{unique_name[:48]}-{unique_name[-6:]}"
    ns = namespace_with(kube, f"{base}-r", "restricted", test_labels)
    privileged = namespace_with(kube, f"{base}-p", "privileged", test_labels)
    sa = workload["spec"]["template"]["spec"]["serviceAccountName"]
    try:
        for namespace in (ns, privileged):  # the ServiceAccount admission plugin needs it
            body = {"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": sa, "namespace": namespace}}  # fmt: skip
            kube.create(r.SERVICE_ACCOUNTS, body, namespace=namespace)
        pod = pod_of(workload, "p", ns)
        if not expected:
            kube.create(r.PODS, pod, namespace=ns, dry_run=True)
        else:
            with pytest.raises(Forbidden) as err:
                kube.create(r.PODS, pod, namespace=ns, dry_run=True)
            assert violations(err.value.message) == expected, err.value.message
        kube.create(r.PODS, pod_of(workload, "p", privileged), namespace=privileged, dry_run=True)
    finally:
        for name in (ns, privileged):
            kube.delete(r.NAMESPACES, name, propagation_policy="Background")

"""The test control plane itself: version, readiness, admission, identities."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from local_ccm.kube.client import Client
from local_ccm.kube.errors import Forbidden
from tests.support import resources as r
from tests.support import selftest
from tests.support.binaries import load_pins
from tests.support.cleanup import NodeFactory
from tests.support.controlplane import ControlPlane
from tests.support.waiting import eventually

SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def _whoami(kubeconfig: Any) -> dict[str, Any]:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    with Client.from_kubeconfig(kubeconfig, field_manager="local-ccm-test") as client:
        review = client.request("POST", SELF_SUBJECT_REVIEWS, body=body)
    info: dict[str, Any] = review["status"]["userInfo"]
    return info


def test_version_equals_the_pin(control_plane: ControlPlane, kube: Client) -> None:
    version = kube.request("GET", "/version")
    assert version["gitVersion"] == load_pins().kubernetes == control_plane.version, version


def test_readyz_is_ok(kube: Client) -> None:
    assert kube.request("GET", "/readyz").strip() == "ok"


def test_admission_self_test_saw_the_policy_deny(control_plane: ControlPlane) -> None:
    result = control_plane.admission_self_test
    assert result.startswith("denied: HTTP 403"), result
    assert selftest.MESSAGE in result, result


def test_self_test_policy_was_removed(kube: Client) -> None:
    names = [p["metadata"]["name"] for p in kube.list(r.VALIDATING_ADMISSION_POLICIES)["items"]]
    assert selftest.NAME not in names, names


def test_user_kubeconfig_authenticates_as_that_user_and_groups(
    control_plane: ControlPlane, unique_name: str
) -> None:
    kubeconfig = control_plane.user_kubeconfig(unique_name, ["local-ccm:testers", "second"])
    info = _whoami(kubeconfig)
    assert info["username"] == unique_name, info
    assert {"local-ccm:testers", "second", "system:authenticated"} <= set(info["groups"]), info


def test_user_without_rbac_is_forbidden(control_plane: ControlPlane, unique_name: str) -> None:
    kubeconfig = control_plane.user_kubeconfig(unique_name, [])
    client = Client.from_kubeconfig(kubeconfig, field_manager="local-ccm-test")
    with client, pytest.raises(Forbidden):
        client.list(r.NODES)


def _service_account(kube: Client, namespace: str, name: str, labels: dict[str, str]) -> None:
    body = {"apiVersion": "v1", "kind": "ServiceAccount"}
    kube.create(
        r.SERVICE_ACCOUNTS,
        {**body, "metadata": {"name": name, "labels": labels}},
        namespace=namespace,
    )


def test_token_kubeconfig_authenticates_as_the_service_account(
    control_plane: ControlPlane, kube: Client, test_namespace: str, test_labels: dict[str, str]
) -> None:
    _service_account(kube, test_namespace, "agent", test_labels)
    info = _whoami(control_plane.token_kubeconfig("agent", test_namespace))
    assert info["username"] == f"system:serviceaccount:{test_namespace}:agent", info
    assert f"system:serviceaccounts:{test_namespace}" in info["groups"], info


def test_token_bound_to_a_pod_carries_its_node_name(
    control_plane: ControlPlane,
    kube: Client,
    test_namespace: str,
    test_labels: dict[str, str],
    make_node: NodeFactory,
) -> None:
    node = make_node()["metadata"]["name"]
    _service_account(kube, test_namespace, "agent", test_labels)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "agent", "labels": test_labels},
        "spec": {
            "nodeName": node,
            "serviceAccountName": "agent",
            # Nothing ever runs it: there is no kubelet.
            "containers": [{"name": "c", "image": "registry.invalid/never:run"}],
        },
    }
    kube.create(r.PODS, pod, namespace=test_namespace)
    info = _whoami(control_plane.token_kubeconfig("agent", test_namespace, bound_pod="agent"))
    assert info["extra"][NODE_NAME_EXTRA] == [node], info


def test_make_node_keeps_both_internal_ips_and_the_chosen_transition_time(
    make_node: NodeFactory, kube: Client
) -> None:
    addresses = [
        {"type": "InternalIP", "address": "192.0.2.10"},
        {"type": "InternalIP", "address": "2001:db8::10"},
        {"type": "Hostname", "address": "n1"},
    ]
    since = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    name = make_node(ready="False", ready_since=since, addresses=addresses)["metadata"]["name"]
    node = kube.get(r.NODES, name)
    assert node["status"]["addresses"] == addresses, node
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False", node
    assert ready["lastTransitionTime"] == since.strftime("%Y-%m-%dT%H:%M:%SZ"), node


@pytest.mark.kcm
def test_kcm_gives_a_new_namespace_its_default_service_account(
    kcm: object, kube: Client, test_namespace: str
) -> None:
    eventually(
        lambda: kube.get(r.SERVICE_ACCOUNTS, "default", namespace=test_namespace),
        timeout=30,
        message=f"default ServiceAccount in {test_namespace}",
    )

"""The project's REST layer against the real kube-apiserver: verbs, patch types, errors.

What these prove cannot be faked: how the apiserver answers preconditions, which merge
semantics each patch type has, and that our field manager is recorded.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.config import load_kubeconfig
from local_ccm.kube.errors import Conflict, Forbidden, Invalid, NotFound
from tests.support.controlplane import ControlPlane
from tests.support.resources import NODES, SERVICE_ACCOUNTS, Resource

Track = Callable[..., None]
SELF_SUBJECT_REVIEWS = Resource(
    "authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", namespaced=False
)


def make_node(kube: Client, track: Track, name: str, labels: dict[str, str]) -> Obj:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    track(NODES, name)
    return kube.create(NODES, body)


def rv(obj: Obj) -> str:
    return str(obj["metadata"]["resourceVersion"])


def touch(kube: Client, name: str, value: str) -> Obj:
    """A change that moves the Node's resourceVersion."""
    patch = {"metadata": {"annotations": {"test.local-ccm.io/touch": value}}}
    return kube.patch(NODES, name, patch, patch_type="merge")


def test_version_and_readyz_through_the_escape_hatch(
    kube: Client, control_plane: ControlPlane
) -> None:
    assert kube.request("GET", "/version")["gitVersion"] == control_plane.version
    assert kube.request("GET", "/readyz") == "ok"


def test_crud_round_trip(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    created = make_node(kube, track, unique_name, test_labels)
    assert kube.get(NODES, unique_name)["metadata"]["uid"] == created["metadata"]["uid"]
    selector = ",".join(f"{k}={v}" for k, v in test_labels.items())
    listed = kube.list(NODES, label_selector=selector)
    assert [n["metadata"]["name"] for n in listed["items"]] == [unique_name]
    kube.delete(NODES, unique_name)
    with pytest.raises(NotFound):
        kube.get(NODES, unique_name)


def test_failed_resource_version_test_in_json_patch_is_conflict(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    stale = rv(make_node(kube, track, unique_name, test_labels))
    touch(kube, unique_name, "1")
    patch = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": stale},
        {"op": "add", "path": "/metadata/labels/x", "value": "y"},
    ]
    with pytest.raises(Conflict) as info:
        kube.patch(NODES, unique_name, patch)
    # The apiserver answers a failed `test` with a bare 422 Invalid ("the server rejected
    # our request due to an error in our request", empty details), not 409. The project
    # requires Conflict (a stale read: re-read, recompute), so errors.py maps exactly that
    # answer to a JSON Patch to Conflict and keeps the real status.
    assert info.value.status == 422
    assert info.value.reason == "Invalid"
    assert "x" not in kube.get(NODES, unique_name)["metadata"]["labels"]


def test_update_with_stale_resource_version_is_conflict(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    node = make_node(kube, track, unique_name, test_labels)
    touch(kube, unique_name, "1")
    node["metadata"]["labels"]["x"] = "y"
    with pytest.raises(Conflict) as info:
        kube.update(NODES, node)
    assert info.value.status == 409


def test_delete_with_stale_uid_precondition_is_conflict_and_keeps_the_object(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    node = make_node(kube, track, unique_name, test_labels)
    with pytest.raises(Conflict):
        kube.delete(NODES, unique_name, uid="00000000-0000-0000-0000-000000000000")
    with pytest.raises(Conflict):
        kube.delete(NODES, unique_name, resource_version=str(int(rv(node)) - 1))
    assert kube.get(NODES, unique_name)["metadata"]["uid"] == node["metadata"]["uid"]
    kube.delete(NODES, unique_name, uid=node["metadata"]["uid"], resource_version=rv(node))
    with pytest.raises(NotFound):
        kube.get(NODES, unique_name)


def test_dry_run_delete_with_preconditions_leaves_the_object_in_place(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    """With a DeleteOptions body the apiserver ignores ?dryRun=All; the body must carry it."""
    node = make_node(kube, track, unique_name, test_labels)
    uid = node["metadata"]["uid"]
    kube.delete(NODES, unique_name, uid=uid, resource_version=rv(node), dry_run=True)
    assert kube.get(NODES, unique_name)["metadata"]["uid"] == uid


DUAL_STACK = [
    {"type": "InternalIP", "address": "192.0.2.10"},
    {"type": "InternalIP", "address": "2001:db8::10"},
    {"type": "Hostname", "address": "n1"},
]


def internal_ips(node: Obj) -> list[str]:
    addresses = node.get("status", {}).get("addresses") or []
    return [a["address"] for a in addresses if a["type"] == "InternalIP"]


def test_strategic_merge_collapses_dual_stack_addresses_but_merge_and_json_patch_do_not(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    """Why the project never uses strategic merge for ``status.addresses``.

    The Node API declares ``patchMergeKey: type`` for ``status.addresses``, but a node has
    two entries of type InternalIP on a dual-stack host. Strategic merge treats entries
    with the same ``type`` as one, so the second InternalIP is lost
    (kubernetes/kubernetes#79391). A JSON merge patch or a JSON Patch ``add`` replaces the
    whole list, keeping both, so the agent writes addresses with JSON Patch only.
    """
    make_node(kube, track, unique_name, test_labels)
    single_stack = [DUAL_STACK[0], DUAL_STACK[2]]  # as the kubelet reported it

    def set_single_stack() -> None:
        reset = [{"op": "add", "path": "/status/addresses", "value": single_stack}]
        assert internal_ips(kube.patch(NODES, unique_name, reset, subresource="status")) == [
            "192.0.2.10"
        ]

    set_single_stack()
    smp = kube.patch(
        NODES,
        unique_name,
        {"status": {"addresses": DUAL_STACK}},
        patch_type="strategic",
        subresource="status",
    )
    assert len(internal_ips(smp)) == 1

    set_single_stack()
    merged = kube.patch(
        NODES,
        unique_name,
        {"status": {"addresses": DUAL_STACK}},
        patch_type="merge",
        subresource="status",
    )
    assert internal_ips(merged) == ["192.0.2.10", "2001:db8::10"]

    set_single_stack()
    patch = [{"op": "add", "path": "/status/addresses", "value": DUAL_STACK}]
    patched = kube.patch(NODES, unique_name, patch, subresource="status")
    assert internal_ips(patched) == ["192.0.2.10", "2001:db8::10"]


def managers(obj: Obj) -> dict[str, str]:
    """manager -> subresource ("" for the main resource)."""
    return {m["manager"]: m.get("subresource", "") for m in obj["metadata"]["managedFields"]}


def test_field_manager_is_recorded_in_managed_fields(
    kube: Client,
    control_plane: ControlPlane,
    track: Track,
    unique_name: str,
    test_labels: dict[str, str],
) -> None:
    node = make_node(kube, track, unique_name, test_labels)
    assert managers(node) == {"local-ccm-test": ""}
    other = Client(load_kubeconfig(control_plane.admin_kubeconfig), field_manager="local-ccm-x")
    try:
        patch = [{"op": "add", "path": "/status/addresses", "value": DUAL_STACK[:1]}]
        after = other.patch(NODES, unique_name, patch, subresource="status")
    finally:
        other.close()
    assert managers(after) == {"local-ccm-test": "", "local-ccm-x": "status"}


def test_dry_run_changes_nothing(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    node = make_node(kube, track, unique_name, test_labels)
    patch = [{"op": "add", "path": "/metadata/labels/dry", "value": "run"}]
    answer = kube.patch(NODES, unique_name, patch, dry_run=True)
    assert answer["metadata"]["labels"]["dry"] == "run"
    assert "dry" not in kube.get(NODES, unique_name)["metadata"]["labels"]
    kube.delete(NODES, unique_name, dry_run=True)
    assert rv(kube.get(NODES, unique_name)) == rv(node)


def test_server_side_apply_with_force(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    make_node(kube, track, unique_name, test_labels)
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": unique_name, "labels": {"applied": "yes"}},
    }
    applied = kube.patch(NODES, unique_name, body, patch_type="apply", force=True)
    assert applied["metadata"]["labels"]["applied"] == "yes"


def test_invalid_and_forbidden_are_translated(
    kube: Client, control_plane: ControlPlane, unique_name: str
) -> None:
    with pytest.raises(Invalid):
        kube.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "Bad_Name"}})
    nobody = Client(
        load_kubeconfig(control_plane.user_kubeconfig(unique_name, [])), field_manager="x"
    )
    try:
        with pytest.raises(Forbidden):
            nobody.list(NODES)
    finally:
        nobody.close()


def test_bearer_token_from_a_service_account(
    kube: Client, control_plane: ControlPlane, unique_name: str, test_namespace: str
) -> None:
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": unique_name}}
    kube.create(SERVICE_ACCOUNTS, sa, namespace=test_namespace)
    path = control_plane.token_kubeconfig(unique_name, test_namespace)
    client = Client.from_kubeconfig(path, field_manager="x")
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    try:
        who = client.create(SELF_SUBJECT_REVIEWS, review)
    finally:
        client.close()
    user = who["status"]["userInfo"]["username"]
    assert user == f"system:serviceaccount:{test_namespace}:{unique_name}"


def test_one_client_is_safe_to_share_between_threads(
    kube: Client, track: Track, unique_name: str, test_labels: dict[str, str]
) -> None:
    make_node(kube, track, unique_name, test_labels)
    errors: list[BaseException] = []
    results: list[Any] = []

    def worker() -> None:
        try:
            for _ in range(10):
                results.append(kube.get(NODES, unique_name)["metadata"]["name"])
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert results == [unique_name] * 60


# `socket.getaddrinfo` and `ssl` run the "idna" codec on a str host; its first use imports
# `stringprep` and `unicodedata` (about 3 ms and 0.5 MiB in every process). Both clients hand them
# ASCII hosts as bytes, and TLS still verifies the apiserver's certificate for that name.
NO_IDNA = """
import asyncio, sys
from local_ccm.kube.client import Client
from local_ccm.kube.config import load_kubeconfig
from local_ccm.kube.loopclient import LoopClient

cluster = load_kubeconfig(sys.argv[1])
with Client.from_kubeconfig(sys.argv[1], field_manager="t") as kube:
    version = kube.request("GET", "/version")["gitVersion"]

async def loop() -> str:
    client = LoopClient(cluster, field_manager="t")
    try:
        return (await client.request("GET", "/version"))["gitVersion"]
    finally:
        await client.close()

print(version, asyncio.run(loop()), sorted(m for m in sys.modules
      if m in ("stringprep", "unicodedata", "encodings.idna")))
"""


def test_both_clients_verify_tls_without_loading_the_idna_codec(
    control_plane: ControlPlane,
) -> None:
    assert control_plane.api_url.startswith("https://127.0.0.1:")
    done = subprocess.run(
        [sys.executable, "-c", NO_IDNA, str(control_plane.admin_kubeconfig)],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    v = control_plane.version
    assert done.stdout.split() == [v, v, "[]"]

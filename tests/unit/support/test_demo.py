"""The demo's pure parts (tests/support/demo.py): Node name, registration body, explanation."""

from __future__ import annotations

from typing import Any

from tests.support.demo import describe_node, explain, is_initialised, kubelet_node, node_name_for

NO_ROUTE = {
    "type": "ExternalIP",
    "family": "ipv4",
    "result": "failed",
    "reason": "no_route",
    "detail": "no route to 8.8.8.8: Network is unreachable (ENETUNREACH)",
    "target": "8.8.8.8",
}
FOUND = {"type": "ExternalIP", "family": "ipv4", "result": "found", "address": "192.0.2.2"}
DISABLED = {"type": "InternalIP", "family": "ipv4", "result": "disabled"}
IDS = {"machine_id": "ab" * 16, "system_uuid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
       "boot_id": "7d3d0f9e-0c1a-4f5e-9a57-2b9d5a0f1c11"}  # fmt: skip


def test_node_name_is_the_lower_cased_dns1123_hostname() -> None:
    assert node_name_for("vm") == "vm"
    assert node_name_for("My_Host.Example.COM") == "my-host.example.com"
    assert node_name_for("-weird..name-") == "weird.name"
    assert node_name_for("___") == "localhost"
    assert len(node_name_for("a" * 300)) == 253


def test_kubelet_registration_is_tainted_without_addresses_and_with_a_system_uuid() -> None:
    body, status = kubelet_node("vm", IDS)
    taints = body["spec"]["taints"]
    uninitialized = {"key": "node.cloudprovider.kubernetes.io/uninitialized",
                     "value": "true", "effect": "NoSchedule"}  # fmt: skip
    assert taints == [uninitialized]
    assert "addresses" not in status["status"]
    assert status["status"]["nodeInfo"]["systemUUID"] == IDS["system_uuid"]
    assert body["metadata"]["labels"]["kubernetes.io/hostname"] == "vm"


def test_describe_node_lists_addresses_taints_and_the_agents_marks() -> None:
    node: dict[str, Any] = {
        "metadata": {"annotations": {"local-ccm.io/owned-addresses": "ExternalIP=192.0.2.2"}},
        "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
        "status": {"addresses": [{"type": "ExternalIP", "address": "192.0.2.2"}]},
    }
    lines = describe_node(node)
    assert lines[0] == "  addresses: ExternalIP 192.0.2.2"
    assert lines[1].startswith("  taints:    node.kubernetes.io/not-ready:NoSchedule  (added by")
    assert lines[2] == "  annotation local-ccm.io/owned-addresses=ExternalIP=192.0.2.2"
    assert describe_node({})[:2] == ["  addresses: (none)", "  taints:    (none)"]


def test_is_initialised_means_the_uninitialized_taint_is_gone() -> None:
    tainted = {"spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized"}]}}
    assert not is_initialised(tainted)
    assert is_initialised({"spec": {"taints": [{"key": "node.kubernetes.io/not-ready"}]}})


def test_explain_without_a_default_route_names_the_route_lookup_and_the_held_taint() -> None:
    text = " ".join(explain([DISABLED, NO_ROUTE], initialised=False))
    assert text.startswith("The Node is NOT initialised.")
    assert "no route to 8.8.8.8 (no default route)" in text
    assert "nothing is sent" in text
    assert "keeps the uninitialized taint" in text


def test_explain_an_initialised_node_names_what_was_written_and_the_missing_internal_ip() -> None:
    text = " ".join(explain([DISABLED, FOUND], initialised=True))
    assert text.startswith("The Node is initialised: the agent wrote ExternalIP 192.0.2.2")
    assert "No InternalIP detector is enabled by default" in text

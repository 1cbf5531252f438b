"""The JSON Patches the agent sends (status, condition, taint, provider ID) and the decision
whether to write at all."""

from __future__ import annotations

from typing import Any

import pytest

from local_ccm import names
from local_ccm.agent.core.addresses import (
    AddressPlan,
)
from local_ccm.agent.core.config import AgentConfig, TypeSettings
from local_ccm.agent.core.gates import ProviderIDAction, provider_id_action, render_provider_id
from local_ccm.agent.core.writes import (
    Condition,
    Patch,
    plan_addresses,
    plan_status_patch,
    plan_taint_patch,
)
from local_ccm.kube.request import pointer
from tests.unit.agent.builders import UNINITIALIZED, addrs, detections, found, node

NOW = "2026-11-21T12:00:00Z"
OWNED_PATH = "/metadata/annotations/local-ccm.io~1owned-addresses"
SYNCED = Condition("True", "AddressesSynced", "every enabled detector found an address")
RV_TEST = {"op": "test", "path": "/metadata/resourceVersion", "value": "100"}


def _plan(spec: str, owned: str) -> AddressPlan:
    return AddressPlan(addrs(spec), addrs(owned))


def _ops(patch: Patch | None) -> list[dict[str, Any]]:
    assert patch is not None
    return patch.body()


def test_pointer_escapes_tilde_and_slash() -> None:
    assert pointer("metadata", "annotations", "a~b/c") == "/metadata/annotations/a~0b~1c"


# ------------------------------------------------------------------ status patch
def test_status_patch_tests_rv_first_then_replaces_the_whole_list_a01() -> None:
    n = node(annotations={"other": "x"})
    patch = plan_status_patch(
        n, _plan("Int 192.0.2.10, Ext 198.51.100.10", "Int 192.0.2.10, Ext 198.51.100.10"),
        condition=None, now=NOW,
    )  # fmt: skip
    assert patch is not None
    assert patch.subresource == "status"
    assert patch.content_type == "application/json-patch+json"
    assert patch.body() == [
        RV_TEST,
        {
            "op": "add",
            "path": "/status/addresses",
            "value": [
                {"type": "InternalIP", "address": "192.0.2.10"},
                {"type": "ExternalIP", "address": "198.51.100.10"},
            ],
        },
        {
            "op": "add",
            "path": OWNED_PATH,
            "value": "InternalIP=192.0.2.10,ExternalIP=198.51.100.10",
        },
    ]


def test_status_patch_adds_the_annotations_map_when_the_node_has_none() -> None:
    ops = _ops(plan_status_patch(node(), _plan("Int 192.0.2.10", ""), condition=None, now=NOW))
    assert ops[2] == {
        "op": "add",
        "path": "/metadata/annotations",
        "value": {names.OWNED_ADDRESSES_ANNOTATION: ""},
    }


def test_no_patch_when_list_and_annotation_match() -> None:
    n = node("Int 192.0.2.10", owned="InternalIP=192.0.2.10")
    assert (
        plan_status_patch(n, _plan("Int 192.0.2.10", "Int 192.0.2.10"), condition=None, now=NOW)
        is None
    )


def test_annotation_difference_alone_needs_a_write_a04() -> None:
    # Dedupe leaves the list unchanged, but the annotation must be written once ("").
    n = node("Int 192.0.2.10, Hostname n1")
    ops = _ops(
        plan_status_patch(n, _plan("Int 192.0.2.10, Hostname n1", ""), condition=None, now=NOW)
    )
    assert [o["path"] for o in ops] == [
        "/metadata/resourceVersion",
        "/status/addresses",
        "/metadata/annotations",
    ]


def test_order_difference_alone_needs_a_write() -> None:
    n = node("Ext 203.0.113.10, Int 192.0.2.10", owned="")
    plan = _plan("Int 192.0.2.10, Ext 203.0.113.10", "")
    assert plan_status_patch(n, plan, condition=None, now=NOW) is not None


def test_paused_address_writes_leave_addresses_and_only_carry_the_condition() -> None:
    n = node("Int 192.0.2.10, Hostname n1", conditions=[{"type": "Ready", "status": "True"}])
    conflict = Condition("False", "KubeletOwnsAddresses", "reverted by kubelet")
    ops = _ops(
        plan_status_patch(
            n, _plan("Int 192.0.2.10, Ext 198.51.100.10", "Ext 198.51.100.10"),
            condition=conflict, now=NOW, write_addresses=False,
        )
    )  # fmt: skip
    assert ops[0] == RV_TEST
    assert [o["path"] for o in ops[1:]] == ["/status/conditions/-"]


def test_plan_addresses_reads_the_node_and_round_trips_to_no_write() -> None:
    config = AgentConfig(internal=TypeSettings(), external=TypeSettings())
    detected = detections(int4=found("192.0.2.10"), ext4=found("198.51.100.10"))
    n = node("Int 192.0.2.10, Hostname n1", provided="192.0.2.10", owned="garbage")
    plan = plan_addresses(n, detected, config)
    assert plan.addresses == addrs("Int 192.0.2.10, Ext 198.51.100.10, Hostname n1")
    assert [f.kind for f in plan.findings] == ["malformed_owned"]
    applied = node(
        "Int 192.0.2.10, Ext 198.51.100.10, Hostname n1",
        provided="192.0.2.10",
        owned=plan.annotation,
    )
    assert (
        plan_status_patch(
            applied, plan_addresses(applied, detected, config), condition=None, now=NOW
        )
        is None
    )


# ------------------------------------------------------------------ the condition
def test_condition_is_added_with_a_new_list_when_the_node_has_no_conditions() -> None:
    n = node("Int 192.0.2.10", owned="InternalIP=192.0.2.10")
    n["status"].pop("conditions", None)
    ops = _ops(
        plan_status_patch(n, _plan("Int 192.0.2.10", "Int 192.0.2.10"), condition=SYNCED, now=NOW)
    )
    assert ops == [
        RV_TEST,
        {
            "op": "add",
            "path": "/status/conditions",
            "value": [
                {
                    "type": names.ADDRESSES_SYNCED_CONDITION,
                    "status": "True",
                    "reason": "AddressesSynced",
                    "message": SYNCED.message,
                    "lastHeartbeatTime": NOW,
                    "lastTransitionTime": NOW,
                }
            ],
        },
    ]


def test_existing_condition_is_replaced_by_index_after_a_type_test() -> None:
    old = {
        "type": names.ADDRESSES_SYNCED_CONDITION, "status": "True", "reason": "AddressesSynced",
        "message": "old", "lastTransitionTime": "2026-01-01T00:00:00Z",
    }  # fmt: skip
    n = node(
        "Int 192.0.2.10", owned="InternalIP=192.0.2.10",
        conditions=[{"type": "Ready", "status": "True"}, old],
    )  # fmt: skip
    ops = _ops(
        plan_status_patch(n, _plan("Int 192.0.2.10", "Int 192.0.2.10"), condition=SYNCED, now=NOW)
    )
    assert ops[1] == {"op": "test", "path": "/status/conditions/1/type", "value": old["type"]}
    assert ops[2]["op"] == "replace"
    assert ops[2]["path"] == "/status/conditions/1"
    # status unchanged (True -> True): lastTransitionTime is kept
    assert ops[2]["value"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert ops[2]["value"]["lastHeartbeatTime"] == NOW


def test_condition_status_change_moves_last_transition_time() -> None:
    old = {"type": names.ADDRESSES_SYNCED_CONDITION, "status": "True", "reason": "AddressesSynced",
           "message": SYNCED.message, "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    n = node("Int 192.0.2.10", owned="InternalIP=192.0.2.10", conditions=[old])
    failed = Condition("False", "NoRoute", "ExternalIP ipv4: no route")
    ops = _ops(
        plan_status_patch(n, _plan("Int 192.0.2.10", "Int 192.0.2.10"), condition=failed, now=NOW)
    )
    assert ops[2]["value"]["lastTransitionTime"] == NOW


def test_unchanged_condition_needs_no_write_a15() -> None:
    same = {
        "type": names.ADDRESSES_SYNCED_CONDITION, "status": "True", "reason": "AddressesSynced",
        "message": SYNCED.message, "lastTransitionTime": "x", "lastHeartbeatTime": "y",
    }  # fmt: skip
    n = node("Int 192.0.2.10", owned="InternalIP=192.0.2.10", conditions=[same])
    assert (
        plan_status_patch(n, _plan("Int 192.0.2.10", "Int 192.0.2.10"), condition=SYNCED, now=NOW)
        is None
    )


def test_report_condition_false_removes_an_existing_condition_once() -> None:
    ours = {"type": names.ADDRESSES_SYNCED_CONDITION, "status": "True"}
    n = node("Int 192.0.2.10", owned="InternalIP=192.0.2.10", conditions=[{"type": "Ready"}, ours])
    ops = _ops(
        plan_status_patch(n, _plan("Int 192.0.2.10", "Int 192.0.2.10"), condition=None, now=NOW)
    )
    assert ops[1:] == [
        {"op": "test", "path": "/status/conditions/1/type", "value": ours["type"]},
        {"op": "remove", "path": "/status/conditions/1"},
    ]
    gone = node("Int 192.0.2.10", owned="InternalIP=192.0.2.10", conditions=[{"type": "Ready"}])
    assert (
        plan_status_patch(gone, _plan("Int 192.0.2.10", "Int 192.0.2.10"), condition=None, now=NOW)
        is None
    )


# ------------------------------------------------------------------ taint patch
NOT_READY = {"key": names.NOT_READY_TAINT, "effect": "NoSchedule"}
OTHER = {"key": "example.com/a", "effect": "NoSchedule"}


def test_taint_removal_tests_the_key_at_its_index_then_removes_it_a16() -> None:
    patch = plan_taint_patch(node(taints=[UNINITIALIZED, NOT_READY]), remove_taint=True)
    assert patch is not None
    assert patch.subresource is None
    assert patch.body() == [
        {"op": "test", "path": "/spec/taints/0/key", "value": names.UNINITIALIZED_TAINT},
        {"op": "remove", "path": "/spec/taints/0"},
    ]


def test_every_occurrence_is_removed_highest_index_first_whatever_the_effect() -> None:
    no_exec = {**UNINITIALIZED, "effect": "NoExecute"}
    ops = _ops(plan_taint_patch(node(taints=[UNINITIALIZED, OTHER, no_exec]), remove_taint=True))
    assert [(o["op"], o["path"]) for o in ops] == [
        ("test", "/spec/taints/2/key"), ("remove", "/spec/taints/2"),
        ("test", "/spec/taints/0/key"), ("remove", "/spec/taints/0"),
    ]  # fmt: skip


def test_taint_at_a_later_index_is_tested_at_that_index_a17() -> None:
    ops = _ops(plan_taint_patch(node(taints=[OTHER, UNINITIALIZED]), remove_taint=True))
    assert ops[0] == {
        "op": "test",
        "path": "/spec/taints/1/key",
        "value": names.UNINITIALIZED_TAINT,
    }
    assert all(o["path"] != "/metadata/resourceVersion" for o in ops)


def test_no_taint_patch_when_untainted_or_removal_disabled() -> None:
    assert plan_taint_patch(node(taints=[NOT_READY]), remove_taint=True) is None
    assert plan_taint_patch(node(taints=[UNINITIALIZED]), remove_taint=False) is None


def test_provider_id_goes_in_the_same_patch_before_the_taint_with_an_rv_test_a23() -> None:
    ops = _ops(
        plan_taint_patch(
            node(taints=[UNINITIALIZED]), remove_taint=True, provider_id="local://abc-1"
        )
    )
    assert ops == [
        RV_TEST,
        {"op": "add", "path": "/spec/providerID", "value": "local://abc-1"},
        {"op": "test", "path": "/spec/taints/0/key", "value": names.UNINITIALIZED_TAINT},
        {"op": "remove", "path": "/spec/taints/0"},
    ]


# ------------------------------------------------------------------ provider ID
INFO = {"systemUUID": "ABC-1", "machineID": "m-42"}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("local://{system_uuid}", "local://abc-1"),
        ("local://{node_name}/{machine_id}", "local://n1/m-42"),
        ("static://fixed", "static://fixed"),
    ],
)
def test_provider_id_template_placeholders_come_from_the_node(template: str, expected: str) -> None:
    assert render_provider_id(template, node(node_info=INFO)) == expected


def test_empty_placeholder_value_renders_nothing() -> None:
    assert render_provider_id("local://{system_uuid}", node(node_info={"machineID": "m"})) is None


def test_provider_id_is_set_once_and_a_mismatch_is_reported_not_written_a23() -> None:
    empty = node()
    assert provider_id_action(empty, "local://abc-1", configured=True) == ProviderIDAction(
        "set", "local://abc-1"
    )
    assert provider_id_action(empty, None, configured=True).kind == "unavailable"
    assert provider_id_action(empty, None, configured=False).kind == "none"
    other = node(provider_id="other://x")
    assert provider_id_action(other, "local://abc-1", configured=True) == ProviderIDAction(
        "mismatch", "local://abc-1", "other://x"
    )
    same = node(provider_id="local://abc-1")
    assert provider_id_action(same, "local://abc-1", configured=True).kind == "none"

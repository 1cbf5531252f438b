"""Taint gates, provided-node-ip policies and the condition's reason."""

from __future__ import annotations

from dataclasses import replace
from ipaddress import ip_address, ip_network

import pytest

from local_ccm.agent.core.addresses import (
    AddressPlan,
    Finding,
)
from local_ccm.agent.core.candidates import (
    Failed,
)
from local_ccm.agent.core.config import AgentConfig, ProvidedPolicy, TypeSettings
from local_ccm.agent.core.gates import (
    decide_taint,
    desired_condition,
    no_internal_ip_advice,
    provided_mismatches,
)
from local_ccm.agent.core.writes import plan_addresses
from tests.unit.agent.builders import EXT4, INT4, addrs, detections, found, no_route, node

DEFAULT = AgentConfig()
NO_INTERNAL_IP = (
    "no InternalIP: set --internal-ip-target or --internal-ip-cidrs, "
    "or start the kubelet with --node-ip"
)
MISMATCH = Finding(
    "provided_mismatch", "InternalIP ipv4: detected 192.0.2.10 but ...", "InternalIP", 4
)


def _plan(spec: str, *findings: Finding) -> AddressPlan:
    return AddressPlan(addrs(spec), (), findings)


def test_gate1_nothing_to_do_when_untainted_or_removal_disabled() -> None:
    plan = _plan("Int 192.0.2.10")
    assert not decide_taint(DEFAULT, tainted=False, addresses_synced=True, plan=plan).remove
    off = replace(DEFAULT, remove_taint=False)
    decision = decide_taint(off, tainted=True, addresses_synced=True, plan=plan)
    assert (decision.remove, decision.blocked) == (False, ())


def test_gate2_addresses_are_written_before_the_taint_is_removed_a02() -> None:
    decision = decide_taint(
        DEFAULT, tainted=True, addresses_synced=False, plan=_plan("Int 192.0.2.10")
    )
    assert not decision.remove
    assert decision.waiting_for_addresses


def test_gate3_external_ip_alone_initialises_by_default_a03() -> None:
    decision = decide_taint(
        DEFAULT, tainted=True, addresses_synced=True, plan=_plan("Ext 198.51.100.10, Hostname n1")
    )
    assert decision.remove


def test_gate3_no_ip_at_all_holds_the_taint_a09() -> None:
    decision = decide_taint(DEFAULT, tainted=True, addresses_synced=True, plan=_plan("Hostname n1"))
    assert (decision.remove, decision.blocked) == (False, ("no_internal_ip",))


def test_gate3_require_internal_ip() -> None:
    strict = replace(DEFAULT, require_internal_ip=True)
    held = decide_taint(
        strict, tainted=True, addresses_synced=True, plan=_plan("Ext 198.51.100.10")
    )
    assert held.blocked == ("no_internal_ip",)
    assert decide_taint(
        strict, tainted=True, addresses_synced=True, plan=_plan("Int 192.0.2.5")
    ).remove


def test_gate4_unavailable_provider_id_holds_the_taint() -> None:
    decision = decide_taint(
        DEFAULT,
        tainted=True,
        addresses_synced=True,
        plan=_plan("Int 192.0.2.10"),
        provider_id_blocks=True,
    )
    assert decision.blocked == ("provider_id_unavailable",)


@pytest.mark.parametrize(
    ("policy", "removed", "blocked"),
    [("prefer", True, ()), ("strict", False, ("provided_node_ip_mismatch",))],
)
def test_gate5_mismatch_blocks_only_under_strict_a22(
    policy: ProvidedPolicy, removed: bool, blocked: tuple[str, ...]
) -> None:
    config = replace(DEFAULT, provided_node_ip_policy=policy)
    decision = decide_taint(
        config, tainted=True, addresses_synced=True, plan=_plan("Int 192.0.2.5", MISMATCH)
    )
    assert (decision.remove, decision.blocked) == (removed, blocked)


@pytest.mark.parametrize(
    ("policy", "addresses", "mismatch", "removed"),
    [
        ("prefer", "Int 192.0.2.5", True, True),
        ("strict", "Int 192.0.2.5", True, False),
        ("ignore", "Int 192.0.2.10", False, True),
    ],
)
def test_provided_node_ip_policies_end_to_end_a22(
    policy: ProvidedPolicy, addresses: str, mismatch: bool, removed: bool
) -> None:
    config = AgentConfig(
        internal=TypeSettings(targets=(found("192.0.2.1").address,)),
        external=TypeSettings(),
        provided_node_ip_policy=policy,
    )
    n = node("Int 192.0.2.5", provided="192.0.2.5")
    plan = plan_addresses(n, detections(int4=found("192.0.2.10")), config)
    assert plan.addresses == addrs(addresses)
    assert any(f.kind == "provided_mismatch" for f in plan.findings) == mismatch
    assert decide_taint(config, tainted=True, addresses_synced=True, plan=plan).remove == removed


def test_external_detection_failure_does_not_block_the_taint_a08() -> None:
    n = node("Int 192.0.2.10, Hostname n1")
    plan = plan_addresses(n, detections(ext4=no_route()), DEFAULT)
    assert decide_taint(DEFAULT, tainted=True, addresses_synced=True, plan=plan).remove


# ------------------------------------------------------------------ condition reasons
def test_condition_true_when_every_detector_found_an_address_a01() -> None:
    condition = desired_condition(_plan("Int 192.0.2.10"), detections(int4=found("192.0.2.10")))
    assert (condition.status, condition.reason) == ("True", "AddressesSynced")


def test_condition_no_route_names_the_detector_and_the_kept_address_a10() -> None:
    n = node("Int 192.0.2.10, Ext 203.0.113.10", owned="ExternalIP=203.0.113.10")
    detected = detections(ext4=Failed("no_route", "no route to 8.8.8.8 (ENETUNREACH)"))
    condition = desired_condition(plan_addresses(n, detected, DEFAULT), detected)
    assert (condition.status, condition.reason) == ("False", "NoRoute")
    assert (
        condition.message
        == "ExternalIP ipv4: no route to 8.8.8.8 (ENETUNREACH); keeping 203.0.113.10"
    )


def test_condition_reasons_are_ordered_and_all_listed() -> None:
    detected = {
        EXT4: Failed("no_route", "no route to 8.8.8.8"),
        INT4: Failed("no_eligible_address", "source excluded"),
    }
    condition = desired_condition(
        _plan("Hostname n1", MISMATCH),
        detected,
        blocked=("no_internal_ip",),
        conflict_manager="kubelet",
    )
    assert condition.reason == "KubeletOwnsAddresses"
    parts = condition.message.split("; ")
    assert parts[0].startswith("status.addresses keeps being reverted by kubelet")
    assert parts[2:] == [
        NO_INTERNAL_IP,
        MISMATCH.message,
        "ExternalIP ipv4: no route to 8.8.8.8",  # NoRoute ranks above NoEligibleAddress
        "InternalIP ipv4: source excluded",
    ]


def test_condition_message_is_capped() -> None:
    long = Failed("netlink_error", "x" * 2000)
    condition = desired_condition(_plan("Int 192.0.2.1"), {EXT4: long})
    assert condition.reason == "NetlinkError"
    assert len(condition.message) == 1024


@pytest.mark.parametrize("annotation", ["not-an-ip", "10.0.0.1,10.0.0.2,10.0.0.3"])
def test_an_unparsable_provided_node_ip_is_a_condition_reason_and_an_event(
    annotation: str,
) -> None:
    n = node("Int 192.0.2.10", provided=annotation)
    detected = detections(int4=found("192.0.2.10"))
    plan = plan_addresses(n, detected, DEFAULT)
    condition = desired_condition(plan, detected)
    assert (condition.status, condition.reason) == ("False", "ProvidedNodeIPUnparsable")
    assert annotation in condition.message
    assert [(e.type, e.reason) for e in provided_mismatches(plan.findings)] == [
        ("Warning", "ProvidedNodeIPUnparsable")
    ]


# ------------------------------------------------------------------ advice for no InternalIP
BY_ROUTE = replace(DEFAULT, internal=TypeSettings(targets=(ip_address("192.0.2.1"),)))


def test_no_internal_ip_advice_for_a_provided_ip_not_detected_names_both_sides() -> None:
    mismatch = Finding(
        "provided_mismatch", "...", "InternalIP", 4, "192.0.2.10", expected="192.0.2.5"
    )
    text = no_internal_ip_advice(BY_ROUTE, [ip_address("192.0.2.5")], [mismatch])
    assert text == (
        "no InternalIP: the kubelet's --node-ip is 192.0.2.5, but --internal-ip-target=192.0.2.1 "
        "selects 192.0.2.10 on this host; if 192.0.2.5 is not an address of this host, correct "
        "the kubelet's --node-ip; if it is, change --internal-ip-target=192.0.2.1 to select it; "
        "or set --provided-node-ip-policy=ignore to use 192.0.2.10"
    )


@pytest.mark.parametrize(
    ("config", "provided", "expected"),
    [
        (DEFAULT, "", NO_INTERNAL_IP),
        (
            BY_ROUTE,
            "",
            "no InternalIP: --internal-ip-target=192.0.2.1 finds no address; change it, or "
            "start the kubelet with --node-ip",
        ),
        (
            DEFAULT,
            "192.0.2.5",
            "no InternalIP: the kubelet's --node-ip is 192.0.2.5 but the Node has no InternalIP "
            "entry; set --internal-ip-target or --internal-ip-cidrs to select it",
        ),
        (
            replace(
                DEFAULT,
                internal=TypeSettings(
                    include=(ip_network("10.0.0.0/8"),), exclude=(ip_network("10.9.0.0/16"),)
                ),
            ),
            "192.0.2.5",
            "no InternalIP: --internal-ip-cidrs=10.0.0.0/8,!10.9.0.0/16 finds no address and "
            "the kubelet's --node-ip 192.0.2.5 is not among the Node's addresses; change "
            "--internal-ip-cidrs=10.0.0.0/8,!10.9.0.0/16",
        ),
    ],
)
def test_no_internal_ip_advice_never_asks_for_what_is_set(
    config: AgentConfig, provided: str, expected: str
) -> None:
    ips = [ip_address(p) for p in provided.split(",") if p]
    assert no_internal_ip_advice(config, ips, []) == expected

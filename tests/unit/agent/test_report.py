"""Detect mode output and its exit code."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from ipaddress import IPv4Interface, IPv6Interface, ip_address, ip_network
from typing import Any

from local_ccm.agent.core.candidates import (
    DISABLED,
    Candidate,
    Failed,
    LookupFailed,
    RouteLookup,
    choose_address,
    evaluate_candidates,
)
from local_ccm.agent.core.config import (
    ADDRESS_TYPES,
    FAMILIES,
    AgentConfig,
    TypeSettings,
)
from local_ccm.agent.core.report import (
    NodePlan,
    PlanUnavailable,
    detect_exit_code,
    plan_node,
    render_json,
    render_text,
)
from local_ccm.agent.detect import DetectionReport
from tests.unit.agent.builders import EXT4, INT4, UNINITIALIZED, detections, found, node

NOW = "2026-01-01T00:00:00Z"
NO_ROUTE = "no route to 8.8.8.8: Network is unreachable (ENETUNREACH)"
SPEC_CONFIG = AgentConfig(internal=TypeSettings(targets=(ip_address("192.0.2.1"),)))
SPEC_CANDIDATES = (
    Candidate("eth1", 2, IPv4Interface("192.0.2.10/24")),
    Candidate("eth1", 2, IPv4Interface("192.0.2.100/32")),
    Candidate("cilium_host", 5, IPv4Interface("10.244.0.1/32")),
)
SPEC_LOOKUPS = (
    RouteLookup(ip_address("192.0.2.1"), "unicast", ip_address("192.0.2.10"), 2, "eth1"),
    LookupFailed(ip_address("8.8.8.8"), "no_route", NO_ROUTE),
)


def report_for(
    config: AgentConfig,
    candidates: Sequence[Candidate],
    lookups: Sequence[RouteLookup | LookupFailed] = (),
) -> DetectionReport:
    """What detect_addresses() returns for these kernel answers, built with the pure core."""
    by_target = {lookup.target: lookup for lookup in lookups}
    results = {}
    for kind in ADDRESS_TYPES:
        for family in FAMILIES:
            target = config.settings(kind).target(family)
            lookup = by_target.get(target) if target is not None else None
            results[kind, family] = choose_address(kind, family, config, lookup, candidates)
    verdicts = {k: evaluate_candidates(k, config, candidates) for k in ADDRESS_TYPES}
    return DetectionReport(results, tuple(candidates), verdicts, by_target)


def spec_report() -> DetectionReport:
    return report_for(SPEC_CONFIG, SPEC_CANDIDATES, SPEC_LOOKUPS)


# ------------------------------------------------------------------ text


def test_text_output_has_the_layout_of_the_spec_example() -> None:
    assert render_text(spec_report(), SPEC_CONFIG) == (
        "TYPE        FAMILY  ADDRESS       SOURCE              DETAIL\n"
        "InternalIP  ipv4    192.0.2.10    route 192.0.2.1     dev eth1\n"
        "InternalIP  ipv6    -             disabled\n"
        "ExternalIP  ipv4    -             failed              no route to 8.8.8.8 (ENETUNREACH)\n"
        "ExternalIP  ipv6    -             disabled\n"
        "CANDIDATES\n"
        "eth1         192.0.2.10/24      ok\n"
        "eth1         192.0.2.100/32     excluded: vip\n"
        "cilium_host  10.244.0.1/32      excluded: interface matches cilium_*\n"
    )


def test_long_values_widen_their_column() -> None:
    config = AgentConfig(external=TypeSettings(targets=(ip_address("2001:db8:ffff::1"),)))
    candidate = Candidate(
        "eth0", 2, IPv6Interface("2001:db8:1234:5678::10/64"), frozenset({"permanent"})
    )
    lookup = RouteLookup(
        ip_address("2001:db8:ffff::1"), "unicast", ip_address("2001:db8:1234:5678::10"), 2, "eth0"
    )
    lines = render_text(report_for(config, [candidate], [lookup]), config).splitlines()
    assert lines[0] == (
        "TYPE        FAMILY  ADDRESS                 SOURCE                  DETAIL"
    )
    assert lines[4] == (
        "ExternalIP  ipv6    2001:db8:1234:5678::10  route 2001:db8:ffff::1  dev eth0"
    )
    assert lines[6] == "eth0         2001:db8:1234:5678::10/64  ok"


def test_cidr_selection_names_the_cidr_as_source() -> None:
    config = AgentConfig(internal=TypeSettings(include=(ip_network("192.0.2.0/24"),)))
    report = report_for(config, SPEC_CANDIDATES[:1])
    assert render_text(report, config).splitlines()[1] == (
        "InternalIP  ipv4    192.0.2.10    cidr 192.0.2.0/24   dev eth1"
    )


def test_candidate_status_names_each_type_when_their_verdicts_differ() -> None:
    config = AgentConfig(
        internal=TypeSettings(include=(ip_network("192.0.2.0/24"),)),
        external=TypeSettings(include=(ip_network("203.0.113.0/24"),)),
    )
    lines = render_text(report_for(config, SPEC_CANDIDATES[:1]), config).splitlines()
    assert (
        lines[6] == "eth1         192.0.2.10/24      InternalIP ok; "
        "ExternalIP excluded: not in --external-ip-cidrs"
    )


def test_no_candidates_is_said_explicitly() -> None:
    assert "CANDIDATES\n(no addresses)\n" in render_text(report_for(SPEC_CONFIG, []), SPEC_CONFIG)


# ------------------------------------------------------------------ JSON


def test_json_output_has_detections_candidates_and_no_plan() -> None:
    document = json.loads(render_json(spec_report(), SPEC_CONFIG))
    assert list(document) == ["detections", "candidates", "plan"]
    assert document["plan"] is None
    assert document["detections"][0] == {
        "type": "InternalIP", "family": "ipv4", "result": "found", "address": "192.0.2.10",
        "source": "route", "target": "192.0.2.1", "interface": "eth1",
    }  # fmt: skip
    assert document["detections"][2] == {
        "type": "ExternalIP", "family": "ipv4", "result": "failed", "reason": "no_route",
        "detail": NO_ROUTE, "target": "8.8.8.8",
    }  # fmt: skip
    assert document["detections"][3] == {
        "type": "ExternalIP",
        "family": "ipv6",
        "result": "disabled",
    }


def test_json_candidates_carry_status_and_per_type_rejections() -> None:
    candidates = json.loads(render_json(spec_report(), SPEC_CONFIG))["candidates"]
    assert candidates[1] == {
        "interface": "eth1", "ifindex": 2, "address": "192.0.2.100/32", "family": "ipv4",
        "flags": [], "scope": "global", "operstate": "up", "status": "excluded: vip",
        "rejections": {"InternalIP": "vip", "ExternalIP": "vip"},
    }  # fmt: skip


# ------------------------------------------------------------------ exit code


def test_exit_code_is_zero_when_every_enabled_detector_found_an_address() -> None:
    config = AgentConfig(external=TypeSettings(), internal=SPEC_CONFIG.internal)
    assert detect_exit_code(report_for(config, SPEC_CANDIDATES, SPEC_LOOKUPS)) == 0


def test_exit_code_is_one_when_a_detector_failed() -> None:
    assert detect_exit_code(spec_report()) == 1


def test_exit_code_is_zero_when_every_detector_is_disabled() -> None:
    config = AgentConfig(external=TypeSettings())
    assert detect_exit_code(report_for(config, SPEC_CANDIDATES)) == 0


# ------------------------------------------------------------------ plan


def tainted_node(**kw: Any) -> dict[str, Any]:
    return node("Hostname n1", taints=[UNINITIALIZED], **kw)


def test_plan_writes_addresses_and_removes_taint() -> None:
    plan = plan_node(tainted_node(), detections(int4=found("192.0.2.10")), SPEC_CONFIG, now=NOW)
    assert [(a.type, a.address) for a in plan.desired] == [
        ("InternalIP", "192.0.2.10"), ("Hostname", "n1"),
    ]  # fmt: skip
    assert plan.owned_current is None
    assert plan.owned_desired == "InternalIP=192.0.2.10"
    assert plan.status_patch is not None
    assert plan.status_patch.operations[1] == {
        "op": "add", "path": "/status/addresses",
        "value": [
            {"type": "InternalIP", "address": "192.0.2.10"}, {"type": "Hostname", "address": "n1"},
        ],
    }  # fmt: skip
    assert plan.taint.remove
    assert plan.taint_reasons == ("every gate holds (addresses written first)",)
    assert plan.node_patch is not None
    assert plan.node_patch.body() == [
        {"op": "test", "path": "/spec/taints/0/key", "value": UNINITIALIZED["key"]},
        {"op": "remove", "path": "/spec/taints/0"},
    ]


def test_plan_without_any_address_keeps_the_taint_and_says_why() -> None:
    detected = detections(ext4=Failed("no_route", NO_ROUTE))
    plan = plan_node(tainted_node(), detected, AgentConfig(), now=NOW)
    assert not plan.taint.remove
    assert plan.taint_reasons == ("no InternalIP or ExternalIP",)
    assert plan.condition is not None
    assert plan.condition.reason == "NoInternalIP"
    assert plan.node_patch is None


def test_plan_condition_matches_the_loop_when_require_internal_ip_holds_the_taint() -> None:
    """Detect mode reports the gates the loop passes to the condition (core.decide)."""
    config = replace(AgentConfig(), require_internal_ip=True)
    plan = plan_node(tainted_node(), detections(ext4=found("198.51.100.10")), config, now=NOW)
    assert not plan.taint.remove
    assert plan.condition is not None
    assert (plan.condition.status, plan.condition.reason) == ("False", "NoInternalIP")


def test_plan_with_empty_provider_id_placeholder_keeps_the_taint() -> None:
    plan = plan_node(
        tainted_node(), detections(int4=found("192.0.2.10")), SPEC_CONFIG,
        provider_id="local://{system_uuid}", now=NOW,
    )  # fmt: skip
    assert plan.provider_id.kind == "unavailable"
    assert plan.taint.blocked == ("provider_id_unavailable",)
    assert plan.taint_reasons == (
        "--provider-id local://{system_uuid}: a placeholder is empty on this Node",
    )


def test_plan_sets_provider_id_in_the_taint_patch() -> None:
    n = tainted_node(node_info={"systemUUID": "ABC-1"})
    plan = plan_node(
        n,
        detections(int4=found("192.0.2.10")),
        SPEC_CONFIG,
        provider_id="local://{system_uuid}",
        now=NOW,
    )
    assert plan.node_patch is not None
    assert plan.node_patch.operations[1] == {
        "op": "add",
        "path": "/spec/providerID",
        "value": "local://abc-1",
    }


def test_plan_of_an_initialised_node_changes_nothing() -> None:
    current = node("Int 192.0.2.10, Hostname n1", owned="InternalIP=192.0.2.10")
    config = AgentConfig(
        internal=SPEC_CONFIG.internal, external=TypeSettings(), report_condition=False
    )
    plan = plan_node(current, detections(int4=found("192.0.2.10")), config, now=NOW)
    assert plan.status_patch is None
    assert plan.node_patch is None
    assert not plan.tainted


def plan_text(plan: NodePlan | PlanUnavailable) -> list[str]:
    text = render_text(spec_report(), SPEC_CONFIG, plan)
    return text.split("PLAN", 1)[1].splitlines()


def test_text_plan_lists_addresses_patches_and_taint_decision() -> None:
    plan = plan_node(
        tainted_node(), {INT4: found("192.0.2.10"), EXT4: DISABLED}, SPEC_CONFIG, now=NOW
    )
    lines = plan_text(plan)
    assert lines[0] == " for node n1"
    assert lines[1] == "  current:      Hostname n1"
    assert lines[2] == "  desired:      InternalIP 192.0.2.10, Hostname n1"
    assert lines[3] == '  ownership:    (absent) -> "InternalIP=192.0.2.10"'
    assert (
        lines[4] == "  condition:    True AddressesSynced: every enabled detector found an address"
    )
    assert lines[5].startswith('  status patch: [{"op":"test","path":"/metadata/resourceVersion"')
    assert (
        lines[6]
        == "  taint:        present, would be removed: every gate holds (addresses written first)"
    )
    assert lines[7] == "  provider ID:  unchanged (not set)"
    assert lines[8].startswith('  node patch:   [{"op":"test","path":"/spec/taints/0/key"')


def test_unavailable_plan_says_why_in_text_and_json() -> None:
    missing = PlanUnavailable("n1", 'cannot read the Node: 404 NotFound: nodes "n1" not found')
    assert plan_text(missing) == [
        " for node n1",
        '  not available: cannot read the Node: 404 NotFound: nodes "n1" not found',
    ]
    document = json.loads(render_json(spec_report(), SPEC_CONFIG, missing))
    assert document["plan"] == {"node": "n1", "error": missing.reason}


def test_json_plan_has_lists_ownership_patches_and_taint() -> None:
    plan = plan_node(tainted_node(), detections(int4=found("192.0.2.10")), SPEC_CONFIG, now=NOW)
    document = json.loads(render_json(spec_report(), SPEC_CONFIG, plan))["plan"]
    assert document["node"] == "n1"
    assert document["current"] == [{"type": "Hostname", "address": "n1"}]
    assert document["desired"][0] == {"type": "InternalIP", "address": "192.0.2.10"}
    assert document["ownership"] == {"current": None, "desired": "InternalIP=192.0.2.10"}
    assert document["patches"]["status"][0]["op"] == "test"
    assert document["patches"]["node"][1] == {"op": "remove", "path": "/spec/taints/0"}
    assert document["taint"] == {
        "present": True, "remove": True, "blocked": [],
        "reasons": ["every gate holds (addresses written first)"],
    }  # fmt: skip
    assert document["providerID"] == {"action": "none", "value": None, "existing": None}
    assert document["condition"]["status"] == "True"

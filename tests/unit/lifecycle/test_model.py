"""The Node projection, probe addresses, probe kinds and verdicts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from local_ccm.lifecycle.core.model import (
    ICMP,
    OUT_OF_SERVICE_ANNOTATION,
    Family,
    NodeAddress,
    OutcomeKind,
    ProbeOutcome,
    Taint,
    combine,
    parse_time,
    probe_addresses,
    project_node,
    resolve_kinds,
    slim_node,
    tcp,
)
from tests.fakes.lifecycle import NOW, addresses, node, raw_node


def test_project_node_keeps_the_fields_the_controller_matches() -> None:
    obj = raw_node(
        "w1", labels={"pool": "spot"}, annotations={"a": "1"}, since=NOW - timedelta(seconds=5),
        addresses=[("InternalIP", "127.0.0.2"), ("Hostname", "w1")], resource_version="42",
    )  # fmt: skip
    view = project_node(obj)
    assert (view.name, view.uid, view.resource_version) == ("w1", "uid-w1", "42")
    assert view.labels == {"pool": "spot"}
    assert view.annotations == {"a": "1"}
    assert view.taints == (Taint("ToBeDeletedByClusterAutoscaler", "1763726400", "NoSchedule"),)
    assert (view.ready, view.ready_since) == ("Unknown", NOW - timedelta(seconds=5))
    assert view.addresses == (NodeAddress("InternalIP", "127.0.0.2"), NodeAddress("Hostname", "w1"))
    assert view.deletion_timestamp is None


def test_project_node_without_ready_condition_has_no_status() -> None:
    view = node("w1", ready=None, created=NOW)
    assert (view.ready, view.ready_since, view.creation_timestamp) == (None, None, NOW)


def test_project_node_reads_an_odd_ready_status_as_unknown() -> None:
    assert node("w1", ready="Maybe").ready == "Unknown"


def test_project_node_keeps_only_the_named_annotations_and_the_out_of_service_one() -> None:
    annotations = {"keep": "1", "drop": "2", OUT_OF_SERVICE_ANNOTATION: "t"}
    view = project_node(raw_node("w1", annotations=annotations), annotation_keys={"keep"})
    assert view.annotations == {"keep": "1", OUT_OF_SERVICE_ANNOTATION: "t"}


def test_project_node_survives_a_minimal_object() -> None:
    view = project_node({"metadata": {"name": "x"}})
    assert (view.name, view.uid, view.ready, view.taints, view.addresses) == ("x", "", None, (), ())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-21T12:00:00Z", datetime(2026, 11, 21, 12, tzinfo=UTC)),
        ("2026-11-21T13:00:00+01:00", datetime(2026, 11, 21, 12, tzinfo=UTC)),
        ("2026-11-21T12:00:00.5Z", datetime(2026, 11, 21, 12, 0, 0, 500000, tzinfo=UTC)),
        ("yesterday", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_time(text: str | None, expected: datetime | None) -> None:
    assert parse_time(text) == expected


# ------------------------------------------------------------------ probe addresses
@pytest.mark.parametrize(
    ("listed", "all_addresses", "families", "expected"),
    [
        # every InternalIP of both families [fix]: the original probed only the first
        ([("InternalIP", "198.51.100.8"), ("InternalIP", "2001:db8::8")], False,
         ("ipv4", "ipv6"), ("198.51.100.8", "2001:db8::8")),
        # no InternalIP: the ExternalIPs (l30 n2)
        ([("ExternalIP", "127.0.0.6"), ("Hostname", "n2")], False, ("ipv4", "ipv6"),
         ("127.0.0.6",)),
        # InternalIP present: ExternalIP ignored unless --probe-all-addresses
        ([("InternalIP", "127.0.0.2"), ("ExternalIP", "127.0.0.6")], False, ("ipv4", "ipv6"),
         ("127.0.0.2",)),
        ([("InternalIP", "127.0.0.2"), ("ExternalIP", "127.0.0.6")], True, ("ipv4", "ipv6"),
         ("127.0.0.2", "127.0.0.6")),
        # hostnames are never resolved (l30 n1); link-local skipped; duplicates removed
        ([("Hostname", "n1"), ("InternalIP", "n1.example")], False, ("ipv4", "ipv6"), ()),
        ([("InternalIP", "fe80::1"), ("InternalIP", "::1"), ("InternalIP", "::1")], False,
         ("ipv4", "ipv6"), ("::1",)),
        # family filter (l34)
        ([("InternalIP", "2001:db8::9")], False, ("ipv4",), ()),
    ],
)  # fmt: skip
def test_probe_addresses(
    listed: list[tuple[str, str]], all_addresses: bool, families: tuple[Family, ...],
    expected: tuple[str, ...],
) -> None:  # fmt: skip
    view = node("n", addresses=listed)
    got = probe_addresses(view, all_addresses=all_addresses, families=families)
    assert got == addresses(*expected)


# ------------------------------------------------------------------ probe kinds
def test_l29_ping_count_zero_without_probe_flag_is_unprobed_mode() -> None:
    assert resolve_kinds(None, ping_count=0) == ()


def test_probe_none_is_unprobed_mode() -> None:
    assert resolve_kinds((), ping_count=3) == ()


def test_default_probe_is_icmp() -> None:
    assert resolve_kinds(None, ping_count=3) == (ICMP,)


def test_ping_count_zero_with_tcp_means_tcp_only() -> None:
    assert resolve_kinds((ICMP, tcp(10250)), ping_count=0) == (tcp(10250),)


# ------------------------------------------------------------------ verdict
def _outcomes(*kinds: OutcomeKind) -> list[ProbeOutcome]:
    return [ProbeOutcome(addresses("127.0.0.1")[0], ICMP, k) for k in kinds]


@pytest.mark.parametrize(
    ("kinds", "verdict"),
    [
        (("reply",), "reachable"),
        (("no_reply", "reply"), "reachable"),  # l09: any reply of any address wins
        (("error", "reply"), "reachable"),
        (("no_reply", "error"), "unknown"),  # unknown never deletes
        (("no_reply", "no_route"), "unknown"),
        ((), "unknown"),  # no probe ran
        (("no_reply",), "unreachable"),
        (("no_reply", "no_reply"), "unreachable"),  # l10
    ],
)
def test_combine(kinds: tuple[OutcomeKind, ...], verdict: str) -> None:
    assert combine(_outcomes(*kinds)) == verdict


def test_slim_node_keeps_everything_the_projection_reads_and_drops_the_bulk() -> None:
    full = raw_node(
        "n1", labels={"a": "b"}, annotations={"local-ccm.io/x": "1", "other": "2"},
        deleting=NOW, addresses=(("InternalIP", "198.51.100.9"), ("Hostname", "n1")),
    )  # fmt: skip
    full["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    full["status"]["conditions"].append({"type": "MemoryPressure", "status": "False"})
    full["status"]["images"] = [{"names": ["registry/x:1"], "sizeBytes": 1}] * 50
    full["status"]["nodeInfo"] = {"systemUUID": "u"}
    slim = slim_node(full)
    assert project_node(slim) == project_node(full)
    assert "managedFields" not in slim["metadata"]
    assert set(slim["status"]) == {"conditions", "addresses"}
    assert [c["type"] for c in slim["status"]["conditions"]] == ["Ready"]

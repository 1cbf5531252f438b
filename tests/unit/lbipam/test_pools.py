"""Parsing `LoadBalancerIPPool` objects, selectors and pool status."""

from __future__ import annotations

import ipaddress
from typing import Any

from local_ccm.lbipam.core.pools import (
    AddressRange,
    InvalidPool,
    Pool,
    merge,
    ordered,
    parse_address_text,
    parse_pool,
)
from local_ccm.lbipam.core.status import NodeNetworks, conflicts, desired_status, status_update

NOW = "2026-12-05T00:00:00Z"


def pool_obj(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def valid(obj: dict[str, Any]) -> Pool:
    parsed = parse_pool(obj)
    assert isinstance(parsed, Pool), parsed
    return parsed


def v4(text: str) -> int:
    return int(ipaddress.IPv4Address(text))


def test_cidr_skips_first_and_last_by_default() -> None:
    assert parse_address_text("10.0.0.0/24", allow_first_last=False) == AddressRange(
        4, v4("10.0.0.1"), v4("10.0.0.254")
    )


def test_cidr_keeps_first_and_last_when_allowed() -> None:
    parsed = parse_address_text("10.0.0.0/24", allow_first_last=True)
    assert parsed == AddressRange(4, v4("10.0.0.0"), v4("10.0.0.255"))


def test_point_to_point_and_host_prefixes_keep_every_address() -> None:
    for text, size in (
        ("10.0.0.0/31", 2),
        ("10.0.0.7/32", 1),
        ("fd00::/127", 2),
        ("fd00::1/128", 1),
    ):
        parsed = parse_address_text(text, allow_first_last=False)
        assert isinstance(parsed, AddressRange), text
        assert parsed.size == size, text


def test_range_is_inclusive_and_never_trimmed() -> None:
    parsed = parse_address_text("10.0.0.10-10.0.0.20", allow_first_last=False)
    assert parsed == AddressRange(4, v4("10.0.0.10"), v4("10.0.0.20"))


def test_ipv6_slash_64_is_two_integers_not_a_list() -> None:
    pool = valid(pool_obj(addresses=["fd00::/64"]))
    assert pool.ranges[0].size == 2**64 - 2
    assert pool.capacity(6) == 2**64 - 2


def test_every_problem_is_listed() -> None:
    parsed = parse_pool(
        pool_obj(
            addresses=["10.0.0.0/33", "10.0.0.9-10.0.0.1", "10.0.0.1-fd00::1", "nope"],
            priority="high",
            disabled="yes",
            serviceSelector={"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            namespaceSelector={"matchExpressions": [{"key": "b", "operator": "In"}]},
        )
    )
    assert isinstance(parsed, InvalidPool)
    where = [p.split(":")[0] for p in parsed.problems]
    assert where == [
        "spec.disabled",
        "spec.addresses[0]",
        "spec.addresses[1]",
        "spec.addresses[2]",
        "spec.addresses[3]",
        "spec.priority",
        "spec.serviceSelector.matchExpressions[0].operator",
        "spec.namespaceSelector.matchExpressions[0].values",
    ]


def test_selector_keys_and_values_must_be_labels() -> None:
    """A key the API server's selectors refuse selects nothing under matchLabels, and
    everything under NotIn or DoesNotExist: the pool is invalid instead."""
    parsed = parse_pool(
        pool_obj(
            addresses=["10.0.0.0/30"],
            serviceSelector={"matchLabels": {"bad key!!": "x", "ok": "bad value!"}},
            namespaceSelector={"matchExpressions": [{"key": "-x", "operator": "DoesNotExist"}]},
        )
    )
    assert isinstance(parsed, InvalidPool)
    assert [p.split(": ")[0] for p in parsed.problems] == [
        "spec.serviceSelector.matchLabels['bad key!!']",
        "spec.serviceSelector.matchLabels['ok']",
        "spec.namespaceSelector.matchExpressions[0]",
    ]


def test_empty_address_list_is_a_problem() -> None:
    parsed = parse_pool(pool_obj(addresses=[]))
    assert isinstance(parsed, InvalidPool)
    assert "spec.addresses" in parsed.problems[0]


def test_both_families_in_one_pool() -> None:
    pool = valid(pool_obj(addresses=["fd00::/120", "10.0.0.0/30"]))
    assert pool.families == (4, 6)
    assert (pool.capacity(4), pool.capacity(6)) == (2, 254)


def test_merge_joins_overlapping_and_adjacent_ranges() -> None:
    merged = merge([AddressRange(4, 5, 9), AddressRange(4, 1, 4), AddressRange(6, 1, 2)])
    assert merged == (AddressRange(4, 1, 9), AddressRange(6, 1, 2))


def test_selectors_match_labels_and_expressions() -> None:
    pool = valid(
        pool_obj(
            addresses=["10.0.0.0/30"],
            serviceSelector={
                "matchLabels": {"tier": "web"},
                "matchExpressions": [
                    {"key": "env", "operator": "NotIn", "values": ["dev"]},
                    {"key": "lb", "operator": "Exists"},
                    {"key": "legacy", "operator": "DoesNotExist"},
                ],
            },
            namespaceSelector={
                "matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]
            },
        )
    )
    good = {"tier": "web", "lb": "", "env": "prod"}
    assert pool.selects(good, "ns", {"team": "a"})
    assert not pool.selects(good, "ns", {"team": "b"})
    assert not pool.selects({**good, "env": "dev"}, "ns", {"team": "a"})
    assert not pool.selects({**good, "legacy": "1"}, "ns", {"team": "a"})
    assert not pool.selects({"tier": "web"}, "ns", {"team": "a"})


def test_disabled_pool_selects_nothing() -> None:
    assert not valid(pool_obj(addresses=["10.0.0.0/30"], disabled=True)).selects({}, "ns", {})


def test_pools_are_ordered_by_priority_then_name() -> None:
    pools = [
        valid(pool_obj(n, addresses=["10.0.0.0/30"], priority=p))
        for n, p in (("b", 1), ("c", 0), ("a", 1))
    ]
    assert [p.name for p in ordered(pools)] == ["c", "a", "b"]


def test_conflicts_name_every_overlap() -> None:
    pool = valid(pool_obj("a", addresses=["10.0.0.0/24"]))
    other = valid(pool_obj("b", addresses=["10.0.0.128-10.0.0.130"]))
    apart = valid(pool_obj("c", addresses=["10.0.1.0/24"]))
    nodes = [NodeNetworks("n1", ("10.0.0.5", "192.168.0.1"), ("10.0.0.0/25",))]
    assert conflicts(pool, [pool, other, apart], ["10.0.0.0/16", "fd00::/108"], nodes) == [
        "overlaps pool b",
        "overlaps the Service CIDR 10.0.0.0/16",
        "overlaps address 10.0.0.5 of Node n1",
        "overlaps podCIDR 10.0.0.0/25 of Node n1",
    ]


def test_status_counts_per_family_as_strings() -> None:
    pool = valid(pool_obj(addresses=["10.0.0.0/30", "fd00::/64"]))
    status = desired_status(pool, {4: 1}, [])
    assert status["ipv4"] == {"total": "2", "used": "1", "free": "1"}
    assert status["ipv6"]["free"] == str(2**64 - 2)
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("Ready", "True"),
        ("Conflict", "False"),
    ]


def test_counts_of_a_family_the_pool_lost_are_written_null_so_the_merge_patch_drops_them() -> None:
    both = valid(pool_obj(addresses=["10.0.0.0/30", "fd00::/120"]))
    current = status_update(None, desired_status(both, {}, []), NOW)
    assert current is not None
    assert set(current) == {"ipv4", "ipv6", "conditions"}
    v4 = valid(pool_obj(addresses=["10.0.0.0/30"]))
    wanted = status_update(current, desired_status(v4, {}, []), NOW)
    assert wanted is not None
    assert wanted["ipv6"] is None
    assert wanted["ipv4"] == current["ipv4"]
    written = {k: v for k, v in wanted.items() if v is not None}  # what the apiserver keeps
    assert status_update(written, desired_status(v4, {}, []), NOW) is None
    invalid = status_update(written, desired_status(parse_pool(pool_obj(addresses=["x"])), {}, []),
                            NOW)  # fmt: skip
    assert invalid is not None
    assert invalid["ipv4"] is None


def test_status_of_a_conflicting_pool_is_ready_with_conflict_true() -> None:
    pool = valid(pool_obj(addresses=["10.0.0.0/30"]))
    ready, conflict = desired_status(pool, {}, ["overlaps pool b"])["conditions"]
    assert ready["status"] == "True"
    assert (conflict["status"], conflict["message"]) == ("True", "overlaps pool b")


def test_status_of_an_invalid_pool_is_not_ready_with_the_problems() -> None:
    parsed = parse_pool(pool_obj(addresses=["x", "y"]))
    ready, conflict = desired_status(parsed, {}, [])["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "Invalid")
    assert conflict["status"] == "Unknown"
    assert "spec.addresses[0]" in ready["message"]
    assert "spec.addresses[1]" in ready["message"]


def test_status_of_a_disabled_pool_is_not_ready() -> None:
    pool = valid(pool_obj(addresses=["10.0.0.0/30"], disabled=True))
    assert desired_status(pool, {}, [])["conditions"][0]["reason"] == "Disabled"

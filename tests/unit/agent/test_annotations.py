"""The ownership annotation and the kubelet's provided-node-ip annotation (KEP-3705)."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from local_ccm.agent.core.addresses import (
    encode_owned,
    parse_owned,
    parse_provided,
)
from tests.unit.agent.builders import addrs


def test_owned_annotation_encodes_type_equals_address_in_written_order() -> None:
    entries = addrs("Int 192.0.2.10, Int 2001:db8::10, Ext 203.0.113.10")
    value = "InternalIP=192.0.2.10,InternalIP=2001:db8::10,ExternalIP=203.0.113.10"
    assert encode_owned(entries) == value
    assert parse_owned(value) == (entries, ())


def test_owned_annotation_absent_means_never_written() -> None:
    assert parse_owned(None) == (None, ())


def test_owned_annotation_empty_means_owns_nothing() -> None:
    assert encode_owned(()) == ""
    assert parse_owned("") == ((), ())


def test_owned_annotation_normalises_ipv6_spelling() -> None:
    assert parse_owned("InternalIP=2001:DB8:0::10") == (addrs("Int 2001:db8::10"), ())


@pytest.mark.parametrize(
    "value",
    ["InternalIP", "Hostname=n1", "InternalIP=not-an-ip", "ExternalIP=192.0.2.1,junk"],
)
def test_malformed_owned_annotation_owns_nothing_and_reports(value: str) -> None:
    owned, findings = parse_owned(value)
    assert owned == ()
    assert [f.kind for f in findings] == ["malformed_owned"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ()),
        ("", ()),
        ("192.0.2.10", ("192.0.2.10",)),
        ("192.0.2.10,2001:db8::10", ("192.0.2.10", "2001:db8::10")),
        ("2001:db8::10, 192.0.2.10", ("2001:db8::10", "192.0.2.10")),
    ],
)
def test_provided_node_ip_parses_zero_to_two_ips_in_order(
    value: str | None, expected: tuple[str, ...]
) -> None:
    assert parse_provided(value) == (tuple(ip_address(e) for e in expected), ())


@pytest.mark.parametrize(
    "value", ["nonsense", "192.0.2.1,192.0.2.2", "192.0.2.1,2001:db8::1,192.0.2.3", "0.0.0.0"]
)
def test_unparsable_provided_node_ip_is_empty_plus_a_finding(value: str) -> None:
    ips, findings = parse_provided(value)
    assert ips == ()
    assert [f.kind for f in findings] == ["unparsable_provided"]

"""detect_addresses() against real routing tables.

Every address is from a documentation range; 8.8.8.8 and 2001:4860:4860::8888 are only ever
looked up inside a test namespace, and a lookup sends nothing.
"""

from __future__ import annotations

from dataclasses import replace
from ipaddress import ip_address, ip_network

from local_ccm.agent.core.candidates import (
    DISABLED,
    Failed,
    Found,
)
from local_ccm.agent.core.config import EXTERNAL, INTERNAL, AgentConfig, TypeSettings
from local_ccm.agent.detect import DetectionReport, detect_addresses
from tests.support.netns import Namespace, NetnsFactory

V4_TARGET = "8.8.8.8"
V6_TARGET = "2001:4860:4860::8888"


def settings(targets: str = "", cidrs: str = "", interfaces: str = "") -> TypeSettings:
    """Flag-like spelling: ``settings("192.0.2.1", "10.0.0.0/8,!10.96.0.0/12")``."""
    items = [c for c in cidrs.split(",") if c]
    return TypeSettings(
        targets=tuple(ip_address(t) for t in targets.split(",") if t),
        include=tuple(ip_network(c) for c in items if not c.startswith("!")),
        exclude=tuple(ip_network(c[1:]) for c in items if c.startswith("!")),
        interfaces=tuple(i for i in interfaces.split(",") if i),
    )


def detect(
    ns: Namespace,
    internal: TypeSettings | None = None,
    external: TypeSettings | None = None,
    *,
    include_vips: bool = False,
    interface_exclude: tuple[str, ...] | None = None,
) -> DetectionReport:
    config = AgentConfig(
        internal=internal or TypeSettings(),
        external=external or TypeSettings(),
        include_vips=include_vips,
    )
    if interface_exclude is not None:
        config = replace(config, interface_exclude=interface_exclude)
    return detect_addresses(config, netns=ns.name)


def found(address: str, source: str = "route", interface: str = "eth0") -> Found:
    return Found(ip_address(address), source, interface)  # type: ignore[arg-type]


def two_links(netns: NetnsFactory) -> Namespace:
    """A01's node: eth1 192.0.2.10/24 (internal), eth0 198.51.100.10/24 with the default route."""
    up = netns.uplink(v4=("198.51.100.10/24", "198.51.100.1/24"), v6=None)
    up.node.add_veth("eth1", "eth1p")
    up.node.add_address("eth1", "192.0.2.10/24")
    return up.node


def test_detect_default_route_source_v4(netns: NetnsFactory) -> None:
    up = netns.uplink()
    report = detect(up.node, external=settings(V4_TARGET))
    assert report.results[EXTERNAL, 4] == found("192.0.2.10")
    assert report.results[EXTERNAL, 6] is DISABLED


def test_detect_default_route_source_v6(netns: NetnsFactory) -> None:
    up = netns.uplink()
    report = detect(up.node, external=settings(V6_TARGET))
    assert report.results[EXTERNAL, 6] == found("2001:db8:0:1::10")


def test_a01_detect_internal_and_external_on_separate_links(netns: NetnsFactory) -> None:
    node = two_links(netns)
    report = detect(node, settings("192.0.2.1"), settings("203.0.113.1"))
    assert report.results[INTERNAL, 4] == found("192.0.2.10", interface="eth1")
    assert report.results[EXTERNAL, 4] == found("198.51.100.10")


def test_a05_detect_dual_stack_four_detectors(netns: NetnsFactory) -> None:
    up = netns.uplink(
        v4=("198.51.100.10/24", "198.51.100.1/24"), v6=("2001:db8:2::10/64", "2001:db8:2::1/64")
    )
    node = up.node
    node.add_veth("eth1", "eth1p")
    node.add_address("eth1", "192.0.2.10/24")
    node.add_address("eth1", "2001:db8:1::10/64")
    report = detect(
        node,
        settings("192.0.2.1,2001:db8:1::1"),
        settings("203.0.113.1,2001:db8:ffff::1"),
    )
    assert report.results == {
        (INTERNAL, 4): found("192.0.2.10", interface="eth1"),
        (INTERNAL, 6): found("2001:db8:1::10", interface="eth1"),
        (EXTERNAL, 4): found("198.51.100.10"),
        (EXTERNAL, 6): found("2001:db8:2::10"),
    }


def test_detect_preferred_source_route(netns: NetnsFactory) -> None:
    up = netns.uplink(default_routes=False)
    up.node.batch(
        "addr add 203.0.113.20/24 dev eth0",  # own subnet: a primary, not a secondary
        "route add default via 192.0.2.1 dev eth0 src 203.0.113.20",
        "addr add 2001:db8:0:1::20/64 dev eth0 nodad",
        "route add default via 2001:db8:0:1::1 dev eth0 src 2001:db8:0:1::20",
    )
    report = detect(up.node, external=settings(f"{V4_TARGET},{V6_TARGET}"))
    assert report.results[EXTERNAL, 4] == found("203.0.113.20")
    assert report.results[EXTERNAL, 6] == found("2001:db8:0:1::20")


def test_detect_more_specific_route_beats_the_default(netns: NetnsFactory) -> None:
    up = netns.uplink()
    up.node.add_veth("eth1", "eth1p")
    up.node.batch(
        "addr add 203.0.113.10/24 dev eth1",
        "route add 8.8.8.0/24 via 203.0.113.1 dev eth1",
    )
    assert detect(up.node, external=settings(V4_TARGET)).results[EXTERNAL, 4] == found(
        "203.0.113.10", interface="eth1"
    )


def test_detect_policy_routing_rule_selects_another_table(netns: NetnsFactory) -> None:
    up = netns.uplink(v6=None)
    up.node.add_veth("eth1", "eth1p")
    up.node.batch(
        "addr add 203.0.113.10/24 dev eth1",
        "route add default via 203.0.113.1 dev eth1 table 100",
        "rule add to 8.8.8.8 lookup 100",
    )
    report = detect(up.node, external=settings(f"{V4_TARGET},198.51.100.1"))
    assert report.results[EXTERNAL, 4] == found("203.0.113.10", interface="eth1")


def test_detect_ecmp_default_route_uses_the_shared_source(netns: NetnsFactory) -> None:
    up = netns.uplink(default_routes=False, v6=None)
    up.node.ip(
        "route", "add", "default",
        "nexthop", "via", "192.0.2.1", "dev", "eth0",
        "nexthop", "via", "192.0.2.2", "dev", "eth0",
    )  # fmt: skip
    assert detect(up.node, external=settings(V4_TARGET)).results[EXTERNAL, 4] == found("192.0.2.10")


def test_a07_a08_detect_no_default_route_is_no_route_not_a_crash(netns: NetnsFactory) -> None:
    up = netns.uplink(default_routes=False)
    report = detect(up.node, settings("192.0.2.1"), settings(f"{V4_TARGET},{V6_TARGET}"))
    assert report.results[INTERNAL, 4] == found("192.0.2.10")
    for family in (4, 6):
        result = report.results[EXTERNAL, family]
        assert isinstance(result, Failed)
        assert result.reason == "no_route"
        assert "ENETUNREACH" in result.detail


def test_detect_unreachable_and_blackhole_routes_are_no_route(netns: NetnsFactory) -> None:
    up = netns.uplink()
    up.node.batch("route add unreachable 203.0.113.0/24", "route add blackhole 198.51.100.0/24")
    report = detect(up.node, settings("203.0.113.1"), settings("198.51.100.1"))
    assert [report.results[t, 4] for t in (INTERNAL, EXTERNAL)] == [
        Failed("no_route", report.results[INTERNAL, 4].detail),  # type: ignore[union-attr]
        Failed("no_route", report.results[EXTERNAL, 4].detail),  # type: ignore[union-attr]
    ]


def test_detect_link_local_next_hops(netns: NetnsFactory) -> None:
    up = netns.uplink(default_routes=False)
    up.node.batch(
        "route add default via 169.254.0.1 dev eth0 onlink",
        "route add default via fe80::1 dev eth0",
    )
    report = detect(up.node, external=settings(f"{V4_TARGET},{V6_TARGET}"))
    assert report.results[EXTERNAL, 4] == found("192.0.2.10")
    assert report.results[EXTERNAL, 6] == found("2001:db8:0:1::10")


def test_detect_target_that_is_an_own_address_gives_a_local_route(netns: NetnsFactory) -> None:
    up = netns.uplink()
    report = detect(up.node, settings("192.0.2.10,2001:db8:0:1::10"))
    assert report.results[INTERNAL, 4] == found("192.0.2.10")
    assert report.results[INTERNAL, 6] == found("2001:db8:0:1::10")


def test_detect_pass_sends_nothing(netns: NetnsFactory) -> None:
    up = netns.uplink(v6=None)  # IPv6 disabled: nothing else talks on this link
    before = up.node.link_stats("eth0")["tx"]
    detect(up.node, settings("192.0.2.1", "192.0.2.0/24"), settings(f"{V4_TARGET},192.0.2.99"))
    assert up.node.link_stats("eth0")["tx"] == before

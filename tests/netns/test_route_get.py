"""route_get against real routing tables in throw-away namespaces."""

from __future__ import annotations

import errno
import os
from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from local_ccm.netlink import NoRouteError, route_get
from tests.support.netns import NetnsFactory

V4_TARGET = IPv4Address("8.8.8.8")  # only ever looked up inside a test namespace: nothing is sent
V6_TARGET = IPv6Address("2001:4860:4860::8888")


def test_default_route_gives_source_gateway_and_interface_for_ipv4(netns: NetnsFactory) -> None:
    up = netns.uplink()

    route = route_get(V4_TARGET, netns=up.node.name)

    assert (route.family, route.type, route.table) == (4, "unicast", 254)
    assert route.prefsrc == ip_address("192.0.2.10")
    assert route.gateway == ip_address("192.0.2.1")
    assert (route.oif, route.ifname) == (up.node.link_index("eth0"), "eth0")
    assert str(route.dst) == "8.8.8.8/32"


def test_default_route_gives_source_gateway_and_interface_for_ipv6(netns: NetnsFactory) -> None:
    up = netns.uplink()

    route = route_get(V6_TARGET, netns=up.node.name)

    assert (route.family, route.type, route.table) == (6, "unicast", 254)
    assert route.prefsrc == ip_address("2001:db8:0:1::10")
    assert route.gateway == ip_address("2001:db8:0:1::1")
    assert route.ifname == "eth0"


def test_preferred_source_on_the_route_wins(netns: NetnsFactory) -> None:
    up = netns.uplink(default_routes=False)
    up.node.batch(
        "addr add 192.0.2.20/24 dev eth0",
        "addr add 2001:db8:0:1::20/64 dev eth0 nodad",
        "route add default via 192.0.2.1 dev eth0 src 192.0.2.20",
        "route add default via 2001:db8:0:1::1 dev eth0 src 2001:db8:0:1::20",
    )

    assert route_get(V4_TARGET, netns=up.node.name).prefsrc == ip_address("192.0.2.20")
    assert route_get(V6_TARGET, netns=up.node.name).prefsrc == ip_address("2001:db8:0:1::20")


def test_more_specific_route_beats_the_default(netns: NetnsFactory) -> None:
    up = netns.uplink()
    up.node.add_veth("eth1", "eth1p")
    up.node.batch(
        "addr add 192.0.2.130/25 dev eth1",
        "route add 8.8.8.0/24 via 192.0.2.129 dev eth1",
        "addr add 2001:db8:0:2::10/64 dev eth1 nodad",
        "route add 2001:4860::/32 via 2001:db8:0:2::1 dev eth1",
    )
    # eth0 keeps 192.0.2.10/24; the /25 on eth1 overlaps it on purpose (longest prefix wins)

    v4 = route_get(V4_TARGET, netns=up.node.name)
    v6 = route_get(V6_TARGET, netns=up.node.name)

    assert (v4.ifname, v4.gateway, v4.prefsrc) == (
        "eth1",
        ip_address("192.0.2.129"),
        ip_address("192.0.2.130"),
    )
    assert (v6.ifname, v6.gateway, v6.prefsrc) == (
        "eth1",
        ip_address("2001:db8:0:2::1"),
        ip_address("2001:db8:0:2::10"),
    )
    assert route_get(ip_address("9.9.9.9"), netns=up.node.name).ifname == "eth0"


def test_ecmp_default_route_resolves_to_one_of_its_next_hops(netns: NetnsFactory) -> None:
    up = netns.uplink(default_routes=False)
    up.node.ip(
        "route", "add", "default",
        "nexthop", "via", "192.0.2.1", "dev", "eth0",
        "nexthop", "via", "192.0.2.2", "dev", "eth0",
    )  # fmt: skip

    route = route_get(V4_TARGET, netns=up.node.name)

    assert route.gateway in {ip_address("192.0.2.1"), ip_address("192.0.2.2")}
    assert (route.ifname, route.prefsrc) == ("eth0", ip_address("192.0.2.10"))


def _policy_topology(netns: NetnsFactory) -> tuple[str, int]:
    up = netns.uplink()
    up.node.add_veth("eth1", "eth1p")
    up.node.batch(
        "addr add 192.0.2.130/25 dev eth1",
        "route add default via 192.0.2.129 dev eth1 table 100",
        "rule add fwmark 0x1 lookup 100",
        "rule add oif eth1 lookup 100",
    )
    return up.node.name, up.node.link_index("eth1")


def test_policy_routing_with_a_mark_uses_the_rule_table(netns: NetnsFactory) -> None:
    name, _ = _policy_topology(netns)

    marked = route_get(V4_TARGET, netns=name, mark=1)
    plain = route_get(V4_TARGET, netns=name)

    assert (marked.table, marked.ifname, marked.gateway) == (100, "eth1", ip_address("192.0.2.129"))
    assert marked.prefsrc == ip_address("192.0.2.130")
    assert (plain.table, plain.ifname, plain.prefsrc) == (254, "eth0", ip_address("192.0.2.10"))


def test_policy_routing_with_an_output_interface_uses_the_rule_table(netns: NetnsFactory) -> None:
    name, eth1 = _policy_topology(netns)

    route = route_get(V4_TARGET, netns=name, oif=eth1)

    assert (route.table, route.oif, route.gateway) == (100, eth1, ip_address("192.0.2.129"))


@pytest.mark.parametrize("target", [V4_TARGET, V6_TARGET], ids=["ipv4", "ipv6"])
def test_no_default_route_raises_no_route_error_enetunreach(
    netns: NetnsFactory, target: IPv4Address | IPv6Address
) -> None:
    up = netns.uplink(default_routes=False)

    with pytest.raises(NoRouteError) as caught:
        route_get(target, netns=up.node.name)

    assert caught.value.errno == errno.ENETUNREACH
    assert f"no route to {target}" in str(caught.value)
    assert "ENETUNREACH" in str(caught.value)


@pytest.mark.parametrize(
    ("route_type", "expected_errno"),
    [("unreachable", errno.EHOSTUNREACH), ("prohibit", errno.EACCES), ("blackhole", errno.EINVAL)],
)
@pytest.mark.parametrize("family", [4, 6])
def test_reject_routes_raise_no_route_error_in_both_families(
    netns: NetnsFactory, route_type: str, expected_errno: int, family: int
) -> None:
    up = netns.uplink()
    target = V4_TARGET if family == 4 else V6_TARGET
    prefix = "8.8.8.0/24" if family == 4 else "2001:4860::/32"
    up.node.ip(f"-{family}", "route", "add", route_type, prefix)

    with pytest.raises(NoRouteError) as caught:
        route_get(target, netns=up.node.name)

    assert caught.value.errno == expected_errno


def test_ipv6_link_local_next_hop_is_reported(netns: NetnsFactory) -> None:
    up = netns.uplink(default_routes=False)
    up.node.ip("-6", "route", "add", "default", "via", "fe80::1", "dev", "eth0")

    route = route_get(V6_TARGET, netns=up.node.name)

    assert route.gateway == ip_address("fe80::1")
    assert (route.ifname, route.prefsrc) == ("eth0", ip_address("2001:db8:0:1::10"))


def test_ipv4_onlink_link_local_next_hop_is_reported(netns: NetnsFactory) -> None:
    up = netns.uplink(default_routes=False)
    up.node.ip("route", "add", "default", "via", "169.254.0.1", "dev", "eth0", "onlink")

    route = route_get(V4_TARGET, netns=up.node.name)

    assert route.gateway == ip_address("169.254.0.1")
    assert (route.ifname, route.prefsrc) == ("eth0", ip_address("192.0.2.10"))


def test_own_address_gives_a_local_route_with_itself_as_source(netns: NetnsFactory) -> None:
    up = netns.uplink()

    route = route_get(ip_address("192.0.2.10"), netns=up.node.name)

    # (the table is 254, not 255: without custom rules the kernel merges local into main)
    assert (route.type, route.prefsrc) == ("local", ip_address("192.0.2.10"))
    assert route.ifname == "lo"


def test_lookup_in_a_namespace_leaves_the_calling_thread_where_it_was(netns: NetnsFactory) -> None:
    before = os.stat("/proc/thread-self/ns/net").st_ino
    up = netns.uplink()

    route_get(V4_TARGET, netns=up.node.name)

    assert os.stat("/proc/thread-self/ns/net").st_ino == before
    assert os.stat("/proc/self/ns/net").st_ino == before

"""On which of this Node's interfaces an address is announced."""

from __future__ import annotations

import ipaddress

import pytest

from local_ccm.announce.core.interfaces import NodeInterface, desired_interfaces, is_on_link
from local_ccm.announce.links import node_interfaces
from local_ccm.netlink.model import Link


def net(*texts: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(t) for t in texts)


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


NODE = [
    NodeInterface("lo", up=True, arp=False, prefixes=net("127.0.0.0/8", "::1/128")),
    NodeInterface("eth0", up=True, arp=True, prefixes=net("192.0.2.0/24", "2001:db8::/64")),
    NodeInterface("eth1", up=False, arp=True, prefixes=net("198.51.100.0/24")),
    NodeInterface("bond0", up=True, arp=True),
    NodeInterface("bond0.100", up=True, arp=True, prefixes=net("203.0.113.0/24")),
    NodeInterface("kube-ipvs0", up=True, arp=False, prefixes=net("192.0.2.10/32")),
    NodeInterface("wg0", up=True, arp=False, prefixes=net("10.9.0.0/24")),
    NodeInterface("cni0", up=True, arp=True, prefixes=net("10.244.1.0/24", "192.0.2.10/32")),
]


@pytest.mark.parametrize(
    ("address", "interfaces"),
    [
        ("192.0.2.10", ("eth0",)),  # not kube-ipvs0 (NOARP) nor cni0 (a /32 is the host's own)
        ("2001:db8::10", ("eth0",)),
        ("203.0.113.7", ("bond0.100",)),
        ("198.51.100.7", ()),  # eth1 is down
        ("10.9.0.5", ()),  # WireGuard does no ARP
        ("127.0.0.5", ()),
        ("198.18.0.1", ()),  # on no segment of this Node: it must not take the address
    ],
)
def test_without_globs_the_up_arp_interfaces_on_the_address_prefix(
    address: str, interfaces: tuple[str, ...]
) -> None:
    assert desired_interfaces(ip(address), (), NODE) == interfaces


@pytest.mark.parametrize(
    ("globs", "interfaces"),
    [
        (("bond*",), ("bond0", "bond0.100")),  # whatever their prefixes
        (("bond0",), ("bond0",)),
        (("eth*",), ("eth0",)),  # eth1 is down
        (("*",), ("bond0", "bond0.100", "cni0", "eth0")),  # never lo, kube-ipvs0 or wg0
        (("eth0", "bond?"), ("bond0", "eth0")),
        (("ens*",), ()),
    ],
)
def test_globs_name_the_interfaces_whatever_their_prefixes(
    globs: tuple[str, ...], interfaces: tuple[str, ...]
) -> None:
    assert desired_interfaces(ip("198.18.0.1"), globs, NODE) == interfaces


def test_on_link_compares_within_a_family_and_ignores_host_prefixes() -> None:
    eth = NodeInterface("eth0", up=True, arp=True, prefixes=net("192.0.2.0/24", "2001:db8::5/128"))
    assert is_on_link(ip("192.0.2.200"), eth)
    assert not is_on_link(ip("2001:db8::5"), eth)
    assert not is_on_link(ip("::ffff:192.0.2.1"), eth)
    point = NodeInterface("p2p", up=True, arp=True, prefixes=net("192.0.2.0/31"))
    assert is_on_link(ip("192.0.2.1"), point)


def test_a_bond_slave_or_a_bridge_port_does_not_answer_its_master_does() -> None:
    """MetalLB skips any interface with a master: a reply from an active-backup bond's backup
    slave teaches the switch the bond's MAC on a port whose frames the bond drops."""
    mac, up = b"\x02\x00\x00\x00\x00\x01", frozenset({"up", "lower_up", "running"})

    def link(index: int, name: str, kind: str | None, master: int | None) -> Link:
        return Link(index, name, up, kind, "up", 1500, master, mac)

    links = [link(2, "eth0", None, 4), link(3, "eth1", None, 4), link(4, "bond0", "bond", None),
             link(5, "eth2", None, 6), link(6, "br0", "bridge", None)]  # fmt: skip
    found = {i.name: i.arp for i in node_interfaces(links, [])}
    assert found == {"bond0": True, "br0": True, "eth0": False, "eth1": False, "eth2": False}

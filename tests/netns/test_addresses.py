"""dump_addresses and dump_links against real kernel state (flags, VIPs, CNI)."""

from __future__ import annotations

import select
import time
from ipaddress import ip_interface

from local_ccm.netlink import Address, Link, Monitor, dump_addresses, dump_links
from tests.support.netns import Namespace, NetnsFactory
from tests.support.waiting import eventually

DAD_DEADLINE = 10.0  # DAD takes about one retransmit interval (1 s); allow for a busy machine


def _find(ns: Namespace, cidr: str) -> Address:
    wanted = ip_interface(cidr)
    found = [a for a in dump_addresses(netns=ns.name) if a.address == wanted]
    assert len(found) == 1, f"{cidr} not found exactly once: {found}"
    return found[0]


def _links(ns: Namespace) -> dict[str, Link]:
    return {link.name: link for link in dump_links(netns=ns.name)}


def _wait_for_flag(ns: Namespace, cidr: str, flag: str) -> Address:
    """Re-read whenever an address notification arrives, until ``flag`` shows or time is up."""
    deadline = time.monotonic() + DAD_DEADLINE
    with Monitor(netns=ns.name) as monitor:
        while True:
            address = _find(ns, cidr)
            remaining = deadline - time.monotonic()
            if flag in address.flags or remaining <= 0:
                return address
            select.select([monitor], [], [], remaining)
            monitor.read_events()


def test_addresses_carry_interface_names_prefix_scope_and_permanent_flag(
    netns: NetnsFactory,
) -> None:
    up = netns.uplink()

    addresses = dump_addresses(netns=up.node.name)

    eth0 = up.node.link_index("eth0")
    v4 = _find(up.node, "192.0.2.10/24")
    v6 = _find(up.node, "2001:db8:0:1::10/64")
    assert (v4.family, v4.ifindex, v4.ifname, v4.label, v4.prefixlen) == (
        4,
        eth0,
        "eth0",
        "eth0",
        24,
    )
    assert (v4.scope_name, v4.valid_lft, v4.preferred_lft) == ("global", None, None)
    assert v4.flags == frozenset({"permanent"})
    assert (v6.family, v6.ifname, v6.label, v6.prefixlen) == (6, "eth0", None, 64)
    assert v6.flags == frozenset({"permanent", "nodad"})
    loopback = {str(a.address) for a in addresses if a.ifname == "lo"}
    assert loopback == {"127.0.0.1/8", "::1/128"}
    assert {a.scope_name for a in addresses if a.ifname == "lo"} == {"host"}
    link_local = [a for a in addresses if a.ifname == "eth0" and a.address.is_link_local]
    assert [a.scope_name for a in link_local] == ["link"]


def test_family_filter_returns_one_family(netns: NetnsFactory) -> None:
    up = netns.uplink()

    assert {a.family for a in dump_addresses(family=4, netns=up.node.name)} == {4}
    assert {a.family for a in dump_addresses(family=6, netns=up.node.name)} == {6}


def test_zero_preferred_lifetime_is_deprecated(netns: NetnsFactory) -> None:
    up = netns.uplink()
    up.node.add_address(
        "eth0", "2001:db8:0:1::20/64", options=["preferred_lft", "0", "valid_lft", "3600"]
    )
    up.node.add_address(
        "eth0", "192.0.2.20/24", options=["preferred_lft", "0", "valid_lft", "3600"]
    )

    v6 = _find(up.node, "2001:db8:0:1::20/64")
    v4 = _find(up.node, "192.0.2.20/24")

    assert "deprecated" in v6.flags
    assert "deprecated" in v4.flags
    assert (v6.preferred_lft, v4.preferred_lft) == (0, 0)
    assert v6.valid_lft is not None
    assert 0 < v6.valid_lft <= 3600
    assert "permanent" not in v6.flags


def test_address_without_nodad_while_peer_is_down_stays_tentative(netns: NetnsFactory) -> None:
    up = netns.uplink()
    up.gateway.ip("link", "set", "gw0", "down")
    up.node.add_address("eth0", "2001:db8:0:1::30/64", nodad=False)

    address = _find(up.node, "2001:db8:0:1::30/64")

    assert "tentative" in address.flags
    assert "nodad" not in address.flags


def test_address_already_used_by_the_peer_fails_dad(netns: NetnsFactory) -> None:
    up = netns.uplink()
    up.gateway.add_address("gw0", "2001:db8:0:1::40/64")  # nodad: the peer owns it first
    up.node.add_address("eth0", "2001:db8:0:1::40/64", nodad=False)

    address = _wait_for_flag(up.node, "2001:db8:0:1::40/64", "dadfailed")

    assert "dadfailed" in address.flags, address
    assert "tentative" in address.flags  # the kernel keeps a failed address tentative


def test_host_prefix_vips_and_secondary_addresses(netns: NetnsFactory) -> None:
    up = netns.uplink()
    up.node.batch(
        "addr add 192.0.2.11/24 dev eth0",
        "addr add 192.0.2.100/32 dev eth0",
        "addr add 192.0.2.12/24 dev eth0 label eth0:vip",
        "addr add 2001:db8:0:1::100/128 dev eth0 nodad",
    )

    primary = _find(up.node, "192.0.2.10/24")
    secondary = _find(up.node, "192.0.2.11/24")
    labelled = _find(up.node, "192.0.2.12/24")
    vip4 = _find(up.node, "192.0.2.100/32")
    vip6 = _find(up.node, "2001:db8:0:1::100/128")

    assert "secondary" not in primary.flags
    assert "secondary" in secondary.flags
    assert (labelled.label, labelled.ifname, "secondary" in labelled.flags) == (
        "eth0:vip",
        "eth0",
        True,
    )
    assert (vip4.prefixlen, "secondary" in vip4.flags) == (32, False)
    assert (vip6.prefixlen, vip6.ifname) == (128, "eth0")
    assert "temporary" not in vip6.flags  # bit 0x01 means "temporary" for IPv6, not "secondary"


def test_cni_like_devices_are_reported_with_their_names_and_kind(netns: NetnsFactory) -> None:
    up = netns.uplink()
    devices = {
        "cni0": "192.0.2.65/27",
        "cilium_host": "192.0.2.97/32",
        "kube-ipvs0": "192.0.2.98/32",
        "flannel.1": "192.0.2.99/32",
        "wg0": "192.0.2.101/32",
    }
    for index, (name, cidr) in enumerate(devices.items()):
        up.node.add_veth(name, f"peer{index}")
        up.node.add_address(name, cidr)
        up.node.add_address(name, f"2001:db8:0:{index + 10:x}::1/64")

    addresses = dump_addresses(netns=up.node.name)
    links = {link.name: link for link in dump_links(netns=up.node.name)}

    by_name = {(a.ifname, str(a.address)) for a in addresses}
    for index, (name, cidr) in enumerate(devices.items()):
        assert (name, cidr) in by_name
        assert (name, f"2001:db8:0:{index + 10:x}::1/64") in by_name
        assert links[name].kind == "veth"
        assert {a.ifindex for a in addresses if a.ifname == name} == {links[name].index}


def test_links_report_flags_operstate_and_kind(netns: NetnsFactory) -> None:
    up = netns.uplink()
    up.node.add_veth("spare0", "spare1", up=False)

    links = _links(up.node)

    assert set(links) == {"lo", "eth0", "spare0", "spare1"}
    assert links["lo"].is_loopback
    assert links["lo"].is_up
    assert links["lo"].kind is None
    assert (links["eth0"].is_up, links["eth0"].kind, links["eth0"].mtu) == (True, "veth", 1500)
    # carrier comes up asynchronously (linkwatch), so wait for it rather than sleep
    eventually(
        lambda: _links(up.node)["eth0"].operstate == "up", timeout=5, message="eth0 operstate up"
    )
    assert _links(up.node)["eth0"].is_running
    assert (links["spare0"].is_up, links["spare0"].is_running, links["spare0"].operstate) == (
        False,
        False,
        "down",
    )
    assert not links["eth0"].is_loopback


def test_a_large_dump_spanning_many_datagrams_is_complete(netns: NetnsFactory) -> None:
    up = netns.uplink()
    wanted = {f"2001:db8:0:5::{i:x}/128" for i in range(1, 601)}  # ~50 KiB of replies
    up.node.batch(*(f"addr add {cidr} dev eth0 nodad" for cidr in sorted(wanted)))

    got = {str(a.address) for a in dump_addresses(family=6, netns=up.node.name)}

    assert wanted <= got
    assert len(got) == len(wanted) + 3  # plus ::1, 2001:db8:0:1::10 and eth0's link-local

"""'A lookup sends nothing': route lookups and dumps leave TX counters alone."""

from __future__ import annotations

import socket
from ipaddress import ip_address

from local_ccm.netlink import dump_addresses, dump_links, route_get, run_in_netns
from tests.support.netns import NetnsFactory
from tests.support.waiting import eventually


def test_route_lookups_and_dumps_send_no_packet(netns: NetnsFactory) -> None:
    # IPv4 only, IPv6 disabled in both namespaces: nothing else talks on this link
    up = netns.uplink(v6=None)
    before = up.node.link_stats("eth0")["tx"]

    for target in ("8.8.8.8", "192.0.2.1", "192.0.2.99"):  # default route, gateway, silent peer
        route_get(ip_address(target), netns=up.node.name)
    dump_addresses(netns=up.node.name)
    dump_links(netns=up.node.name)

    assert up.node.link_stats("eth0")["tx"] == before


def test_the_counters_do_move_when_a_packet_is_sent(netns: NetnsFactory) -> None:
    """The control for the test above: a real datagram to the gateway shows in the counters."""
    up = netns.uplink(v6=None)
    before = up.node.tx_packets("eth0")
    sock = run_in_netns(up.node.name, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    with sock:
        sock.sendto(b"x", ("192.0.2.1", 9))  # the gateway namespace: nothing leaves the machine

    eventually(lambda: up.node.tx_packets("eth0") > before, timeout=5, message="TX moved")

"""The real prober in the test process's namespace, as root (raw ICMP) and over TCP.

Targets: loopback and the peer end of a host-side veth (reachable); an unused address of the
test's own /28 and /64 (silent: neighbour resolution fails and nothing leaves the veth).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from ipaddress import ip_address

import pytest

from local_ccm.lifecycle.core.model import ICMP, IPAddress, ProbeKind, ProbeOutcome, combine, tcp
from local_ccm.lifecycle.probe import ProbeConfig, SocketProber, detect_capabilities
from tests.support.netns import HostLink, NetnsFactory

CONFIG = ProbeConfig(count=2, interval=0.2, timeout=0.8, concurrency=8)
# Targets that must answer get more time: on a freshly created veth, IPv6 neighbour discovery
# on a loaded 2-core machine took longer than 0.8 s once in a full `make test`. A longer budget
# does not weaken "must reply".
REACHABLE = ProbeConfig(count=4, interval=0.5, timeout=3.0, concurrency=8)


@pytest.fixture
def link(netns: NetnsFactory) -> HostLink:
    return netns.host_link(netns())


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 and ::1 (same free port); yields the port."""
    v4 = socket.create_server(("127.0.0.1", 0))
    port = v4.getsockname()[1]
    v6 = socket.create_server(("::1", port), family=socket.AF_INET6)
    with v4, v6:
        yield port


def prober(mode: str = "raw", config: ProbeConfig = CONFIG) -> SocketProber:
    caps = detect_capabilities([ICMP, tcp(1)], ["ipv4", "ipv6"], mode)  # type: ignore[arg-type]
    assert all(c.usable for c in caps.entries), caps.problems
    return SocketProber(config, caps)


def probe_one(
    address: IPAddress | str, kind: ProbeKind, config: ProbeConfig = CONFIG
) -> ProbeOutcome:
    return asyncio.run(prober(config=config).probe_one(ip_address(address), kind))


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.7", "::1"])
def test_raw_icmp_loopback_replies(address: str) -> None:
    outcome = probe_one(address, ICMP)
    assert (outcome.outcome, outcome.detail) == ("reply", "echo reply")


def test_auto_mode_as_root_chooses_raw_sockets() -> None:
    caps = detect_capabilities([ICMP], ["ipv4", "ipv6"], "auto")
    assert [(c.family, c.mode) for c in caps.entries] == [("ipv4", "raw"), ("ipv6", "raw")]


def test_raw_icmp_veth_peer_replies_ipv4_and_ipv6(link: HostLink) -> None:
    assert probe_one(link.ns_v4.ip, ICMP, REACHABLE).outcome == "reply"
    assert probe_one(link.ns_v6.ip, ICMP, REACHABLE).outcome == "reply"


def test_l10_raw_icmp_unused_addresses_are_silent_ipv4_and_ipv6(link: HostLink) -> None:
    for address in (link.unused_v4, link.unused_v6):
        outcome = probe_one(address, ICMP)
        assert outcome.outcome == "no_reply", outcome
        assert outcome.duration <= CONFIG.timeout + 0.3


def test_l11_tcp_open_port_replies(listener: int) -> None:
    for address in ("127.0.0.1", "::1"):
        outcome = probe_one(address, tcp(listener))
        assert (outcome.outcome, outcome.detail) == ("reply", "connected")


def test_l11_tcp_refused_counts_as_a_reply_because_the_kernel_answered(link: HostLink) -> None:
    # an RST proves the host's kernel is alive: the port is closed, the Node is not dead
    for address in (link.ns_v4.ip, link.ns_v6.ip):
        outcome = probe_one(address, tcp(10250))
        assert (outcome.outcome, outcome.detail) == ("reply", "connection refused")


def test_l11_tcp_silent_address_is_no_reply(link: HostLink) -> None:
    for address in (link.unused_v4, link.unused_v6):
        outcome = probe_one(address, tcp(10250))
        assert outcome.outcome == "no_reply", outcome
        assert outcome.duration <= CONFIG.timeout + 0.3


def test_l09_node_probe_any_reply_wins_and_ends_early(link: HostLink) -> None:
    targets: list[IPAddress] = [link.unused_v4, link.ns_v6.ip]
    outcomes = asyncio.run(prober(config=REACHABLE).probe(targets, [ICMP, tcp(10250)]))
    assert combine(outcomes) == "reachable"
    assert any(o.outcome == "reply" for o in outcomes)
    assert all(o.address != link.unused_v4 for o in outcomes)  # cancelled before its timeout


def test_l10_node_probe_all_silent_is_unreachable(link: HostLink) -> None:
    targets: list[IPAddress] = [link.unused_v4, link.unused_v6]
    outcomes = asyncio.run(prober().probe(targets, [ICMP]))
    assert [o.outcome for o in outcomes] == ["no_reply", "no_reply"]
    assert combine(outcomes) == "unreachable"

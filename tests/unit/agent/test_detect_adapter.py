"""detect_addresses() glue, with an in-memory NetlinkReader (the seam) instead of the kernel."""

from __future__ import annotations

import errno
from ipaddress import IPv4Network, ip_address, ip_interface, ip_network

from local_ccm import netlink
from local_ccm.agent.core.candidates import (
    DISABLED,
    Failed,
    Found,
    LookupFailed,
)
from local_ccm.agent.core.config import EXTERNAL, INTERNAL, AgentConfig, IPAddress, TypeSettings
from local_ccm.agent.detect import detect_addresses, to_candidate
from tests.fakes.netlink import FakeNetlink


def _link(index: int, name: str, *, up: bool = True) -> netlink.Link:
    flags = frozenset({"up", "running", "lower_up"} if up else set())
    return netlink.Link(index, name, flags, "veth", "up" if up else "down", 1500, None)


def _addr(index: int, name: str, cidr: str, *flags: str) -> netlink.Address:
    iface = ip_interface(cidr)
    return netlink.Address(
        iface.version, index, name, iface, None, 0, name, frozenset(flags), None, None
    )


def _route(dst: IPAddress, src: str, oif: int, name: str) -> netlink.Route:
    net = IPv4Network(f"{dst}/32") if dst.version == 4 else ip_network(f"{dst}/128")
    return netlink.Route(
        dst.version, net, "unicast", 254, 3, 0, oif, name, None, ip_address(src), None
    )


T_INT, T_EXT = ip_address("192.0.2.1"), ip_address("8.8.8.8")
CONFIG = AgentConfig(
    internal=TypeSettings(targets=(T_INT,)), external=TypeSettings(targets=(T_EXT,))
)


def _host() -> FakeNetlink:
    return FakeNetlink(
        routes={
            T_INT: _route(T_INT, "192.0.2.10", 3, "eth1"),
            T_EXT: netlink.NoRouteError(errno.ENETUNREACH, "no route to 8.8.8.8 (ENETUNREACH)"),
        },
        addrs=[_addr(3, "eth1", "192.0.2.10/24", "permanent"), _addr(1, "lo", "127.0.0.1/8")],
        links_=[_link(1, "lo"), _link(3, "eth1")],
    )


def test_each_detector_gets_its_result_and_disabled_ones_are_reported_a08() -> None:
    report = detect_addresses(CONFIG, reader=_host())
    assert report.results == {
        (INTERNAL, 4): Found(ip_address("192.0.2.10"), "route", "eth1"),
        (INTERNAL, 6): DISABLED,
        (EXTERNAL, 4): Failed("no_route", "no route to 8.8.8.8 (ENETUNREACH)"),
        (EXTERNAL, 6): DISABLED,
    }
    assert isinstance(report.lookups[T_EXT], LookupFailed)
    assert [v.rejection for v in report.verdicts[INTERNAL]] == [None, "interface matches lo"]


def test_a_target_shared_by_both_types_is_looked_up_once() -> None:
    fake = _host()
    config = AgentConfig(
        internal=TypeSettings(targets=(T_INT,)), external=TypeSettings(targets=(T_INT,))
    )
    report = detect_addresses(config, reader=fake)
    assert fake.lookups == [T_INT]
    assert report.results[EXTERNAL, 4] == report.results[INTERNAL, 4]


def test_other_netlink_errors_are_netlink_error() -> None:
    fake = _host()
    fake.routes[T_INT] = netlink.NetlinkError(errno.EPERM, "netlink: Operation not permitted")
    assert detect_addresses(CONFIG, reader=fake).results[INTERNAL, 4] == Failed(
        "netlink_error", "netlink: Operation not permitted"
    )


def test_failed_address_dump_fails_every_enabled_detector_without_raising() -> None:
    fake = _host()
    fake.addrs = netlink.NetlinkError(errno.EAGAIN, "dump kept being interrupted")
    results = detect_addresses(CONFIG, reader=fake).results
    assert {k: type(v).__name__ for k, v in results.items()} == {
        (INTERNAL, 4): "Failed", (INTERNAL, 6): "Disabled",
        (EXTERNAL, 4): "Failed", (EXTERNAL, 6): "Disabled",
    }  # fmt: skip
    assert all(v.reason == "netlink_error" for v in results.values() if isinstance(v, Failed))


def test_address_on_a_vanished_link_counts_as_not_present() -> None:
    candidate = to_candidate(_addr(9, "eth9", "192.0.2.20/24"), None)
    assert (candidate.link_up, candidate.operstate, candidate.ifname) == (
        False,
        "notpresent",
        "eth9",
    )


def test_a_pass_on_the_same_dump_whose_lookups_answer_as_before_is_the_last_report() -> None:
    """An idle node's periodic pass: the same candidates and the same route answers give the
    previous report itself (nothing evaluated again); another answer is evaluated anew."""
    host = _host()
    first = detect_addresses(CONFIG, reader=host)
    again = detect_addresses(CONFIG, reader=host, candidates=first.candidates, previous=first)
    assert again is first
    host.routes[T_INT] = _route(T_INT, "192.0.2.10", 3, "eth1")  # the same answer, a new object
    assert detect_addresses(CONFIG, reader=host, candidates=first.candidates,
                            previous=first) is first  # fmt: skip
    host.routes[T_EXT] = _route(T_EXT, "192.0.2.10", 3, "eth1")  # the external target routed
    moved = detect_addresses(CONFIG, reader=host, candidates=first.candidates, previous=first)
    assert moved is not first
    assert moved.results[EXTERNAL, 4] == Found(ip_address("192.0.2.10"), "route", "eth1")
    fresh = detect_addresses(CONFIG, reader=host, previous=moved)  # a new dump: not reused
    assert fresh is not moved
    assert fresh.results == moved.results

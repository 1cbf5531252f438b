"""Monitor: change notifications from a real kernel (changes while running)."""

from __future__ import annotations

import asyncio
import select
import time
from collections.abc import Callable
from ipaddress import ip_interface, ip_network

from local_ccm.netlink import Change, Monitor
from tests.support.netns import NetnsFactory

DEADLINE = 5.0


def _read_until(
    monitor: Monitor, done: Callable[[list[Change]], bool], timeout: float = DEADLINE
) -> list[Change]:
    """Collect changes until ``done(changes)`` holds; wait on the fd, never a fixed sleep."""
    deadline = time.monotonic() + timeout
    changes: list[Change] = []
    while not done(changes):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"expected changes did not arrive in {timeout}s; got {changes}"
        select.select([monitor], [], [], remaining)
        changes += monitor.read_events()
    return changes


def _address_event(cidr: str, *, deleted: bool) -> Callable[[list[Change]], bool]:
    wanted = ip_interface(cidr)

    def seen(changes: list[Change]) -> bool:
        return any(
            c.kind == "address"
            and c.deleted == deleted
            and c.address
            and c.address.address == wanted
            for c in changes
        )

    return seen


def test_nothing_queued_reads_as_an_empty_list(netns: NetnsFactory) -> None:
    ns = netns()
    with Monitor(netns=ns.name) as monitor:
        assert monitor.read_events() == []


def test_address_add_remove_and_re_add_are_each_reported(netns: NetnsFactory) -> None:
    up = netns.uplink()
    with Monitor(netns=up.node.name) as monitor:
        for cidr in ("192.0.2.50/24", "2001:db8:0:1::50/64"):
            up.node.add_address("eth0", cidr)
            added = _read_until(monitor, _address_event(cidr, deleted=False))
            up.node.ip("addr", "del", cidr, "dev", "eth0")
            removed = _read_until(monitor, _address_event(cidr, deleted=True))
            up.node.add_address("eth0", cidr)
            readded = _read_until(monitor, _address_event(cidr, deleted=False))

            event = next(c.address for c in added if c.address and str(c.address.address) == cidr)
            assert event is not None
            assert event.ifindex == up.node.link_index("eth0")
            assert removed
            assert readded


def test_a_burst_is_queued_and_read_in_one_call_for_the_caller_to_collapse(
    netns: NetnsFactory,
) -> None:
    up = netns.uplink()
    cidrs = [f"192.0.2.{100 + i}/24" for i in range(20)]
    with Monitor(netns=up.node.name) as monitor:
        up.node.batch(*(f"addr add {cidr} dev eth0" for cidr in cidrs))

        # rtnetlink queues notifications before the change syscall returns: one read gets them all
        batch = monitor.read_events()

    added = {str(c.address.address) for c in batch if c.kind == "address" and c.address}
    assert added >= set(cidrs)
    assert len(batch) >= len(cidrs)  # many events, which the caller turns into one re-detection


def test_overrun_is_reported_as_a_resync(netns: NetnsFactory) -> None:
    up = netns.uplink()
    with Monitor(netns=up.node.name, rcvbuf=4096) as monitor:
        up.node.batch(*(f"addr add 192.0.2.{i}/32 dev eth0" for i in range(100, 250)))

        changes = monitor.read_events()

    assert any(c.kind == "resync" for c in changes), changes


def test_link_and_route_changes_are_reported(netns: NetnsFactory) -> None:
    up = netns.uplink()
    with Monitor(netns=up.node.name) as monitor:
        up.node.add_veth("cni0", "cni0p")
        links = _read_until(monitor, lambda cs: any(c.link and c.link.name == "cni0" for c in cs))
        up.node.ip("route", "add", "192.0.2.128/25", "via", "192.0.2.1")
        up.node.ip("route", "add", "2001:db8:99::/48", "via", "2001:db8:0:1::1")
        routes = _read_until(
            monitor,
            lambda cs: (
                {str(c.route.dst) for c in cs if c.route} >= {"192.0.2.128/25", "2001:db8:99::/48"}
            ),
        )
        up.node.ip("link", "del", "cni0")
        gone = _read_until(
            monitor, lambda cs: any(c.link and c.link.name == "cni0" and c.deleted for c in cs)
        )

    new_link = next(c.link for c in links if c.link and c.link.name == "cni0")
    assert new_link is not None
    assert new_link.kind == "veth"
    route = next(c.route for c in routes if c.route and c.route.dst == ip_network("192.0.2.128/25"))
    assert route is not None
    assert (route.gateway, route.family, route.type) == (
        ip_interface("192.0.2.1/32").ip,
        4,
        "unicast",
    )
    assert gone


def test_async_changes_yields_batches_from_the_event_loop(netns: NetnsFactory) -> None:
    up = netns.uplink()

    async def scenario() -> list[Change]:
        loop = asyncio.get_running_loop()
        with Monitor(netns=up.node.name) as monitor:
            stream = monitor.changes(loop)
            await loop.run_in_executor(None, up.node.add_address, "eth0", "192.0.2.77/24")
            seen: list[Change] = []
            async with asyncio.timeout(DEADLINE):
                async for batch in stream:
                    seen += batch
                    if _address_event("192.0.2.77/24", deleted=False)(seen):
                        break
            await stream.aclose()
            return seen

    changes = asyncio.run(scenario())

    assert _address_event("192.0.2.77/24", deleted=False)(changes)


def test_changes_in_another_namespace_are_not_seen(netns: NetnsFactory) -> None:
    watched, other = netns.uplink(), netns.uplink()
    with Monitor(netns=watched.node.name) as monitor:
        other.node.add_address("eth0", "192.0.2.66/24")

        # notifications are queued before `ip` returns, so an empty read is conclusive
        assert monitor.read_events() == []

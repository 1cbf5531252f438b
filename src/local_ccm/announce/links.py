"""This Node's interfaces as `interfaces.desired_interfaces` reads them, from rtnetlink, and a
source of the controller kit that reads them again every few seconds and reports a change.

The on-link prefixes are those of the interfaces' addresses (``192.0.2.10/24`` gives
192.0.2.0/24); a prefix only routed on the link (an IPv6 prefix from router advertisements
next to a /128 address) is not read: name the interface in the pool's
``l2Announcement.interfaces`` for such a segment.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from local_ccm.announce.core.interfaces import IPNetwork, NodeInterface
from local_ccm.clock import Clock
from local_ccm.netlink import Address, Link, NetlinkError, dump_addresses, dump_links

log = logging.getLogger(__name__)
Interfaces = tuple[NodeInterface, ...]
ETHERNET_MAC = 6


def node_interfaces(links: Iterable[Link], addresses: Iterable[Address]) -> Interfaces:
    """Each link: up (IFF_UP and a carrier), answering ARP (an Ethernet MAC, IFF_NOARP clear,
    not loopback, no master: a bond's slave or a bridge's port answers through its master, as
    MetalLB skips them; answering on an active-backup bond's backup slave too would teach the
    switch the bond's MAC on a port whose frames the bond drops) and its addresses' prefixes;
    sorted by name."""
    prefixes: dict[int, set[IPNetwork]] = {}
    for address in addresses:
        prefixes.setdefault(address.ifindex, set()).add(address.address.network)
    found = [
        NodeInterface(
            name=link.name,
            up={"up", "lower_up"} <= link.flags,
            arp=link.mac is not None
            and len(link.mac) == ETHERNET_MAC
            and not link.flags & {"noarp", "loopback"}
            and link.master is None,
            prefixes=tuple(sorted(prefixes.get(link.index, ()), key=str)),
        )
        for link in links
    ]
    return tuple(sorted(found, key=lambda i: i.name))


def read_interfaces(netns: str | None = None) -> Interfaces:
    """This Node's interfaces now (blocking: run it in a thread)."""
    return node_interfaces(dump_links(netns=netns), dump_addresses(netns=netns))


class InterfaceSource:
    """A `runtime.controller.Source`: the interfaces, read every `period` seconds; handlers
    hear of a change (and of the first read). A failed read is logged and tried again."""

    name = "interfaces"

    def __init__(self, clock: Clock, period: float, netns: str | None = None) -> None:
        self.clock, self.period, self.netns = clock, period, netns
        self.current: Interfaces = ()
        self._handlers: list[Callable[[Any], None]] = []
        self._synced = asyncio.Event()

    def add_handler(self, handler: Callable[[Any], None]) -> None:
        self._handlers.append(handler)

    async def run(self) -> None:
        while True:
            try:
                fresh = await asyncio.to_thread(read_interfaces, self.netns)
            except NetlinkError as exc:
                log.warning("reading the interfaces failed: %s", exc)
            else:
                if fresh != self.current or not self._synced.is_set():
                    self.current = fresh
                    for handler in self._handlers:
                        handler(fresh)
                self._synced.set()
            await self.clock.sleep(self.period)

    async def wait_synced(self) -> None:
        await self._synced.wait()

"""On which of this Node's interfaces an address is announced. Pure, no I/O.

A pool's ``l2Announcement.interfaces`` globs name them; without globs, the interfaces on the
address's segment: those with an on-link prefix that contains it. Only an interface that is up
and does ARP can answer (an Ethernet MAC, ``IFF_NOARP`` clear): not ``lo``, not a ``dummy`` such
as kube-proxy's ``kube-ipvs0``, which holds every LoadBalancer address as a /32, not a
WireGuard or IP tunnel. A host-length prefix (/32, /128) says the address is on this Node, not
that the segment is, so it does not count.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from local_ccm.announce.core.choice import IPAddress
from local_ccm.ifnames import interface_matches
from local_ccm.records import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class NodeInterface:
    """What the choice reads of one interface of this Node.

    `up`: administratively up with a carrier (the adapter reads IFF_UP and IFF_LOWER_UP).
    `arp`: it can answer, an Ethernet MAC with IFF_NOARP clear. `prefixes`: its on-link
    prefixes, from its addresses (``192.0.2.10/24`` gives 192.0.2.0/24) and its routes without
    a gateway (an IPv6 prefix learned from router advertisements next to a /128 address).
    """

    name: str
    up: bool
    arp: bool
    prefixes: tuple[IPNetwork, ...] = ()


def is_on_link(address: IPAddress, interface: NodeInterface) -> bool:
    """Whether one of the interface's prefixes, shorter than a host's, contains `address`."""
    return any(
        prefix.version == address.version
        and prefix.prefixlen < prefix.max_prefixlen
        and address in prefix
        for prefix in interface.prefixes
    )


def desired_interfaces(
    address: IPAddress, globs: Sequence[str], interfaces: Iterable[NodeInterface]
) -> tuple[str, ...]:
    """The names of the interfaces to answer for `address` on, sorted: among those up that do
    ARP, the ones a glob matches, or without globs the ones on the address's prefix. Empty:
    this Node cannot announce the address, so it must not try to take it (`choice.place`
    with this Node left out of the eligible set)."""
    return tuple(sorted({i.name for i in interfaces if _answers(address, globs, i)}))


def _answers(address: IPAddress, globs: Sequence[str], interface: NodeInterface) -> bool:
    if not (interface.up and interface.arp):
        return False
    if globs:
        return any(interface_matches(interface.name, glob) for glob in globs)
    return is_on_link(address, interface)

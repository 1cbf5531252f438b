"""What the netlink package reports: routes, addresses, links, change notifications, and
its errors. Pure data; ``messages`` parses them from the kernel's bytes.
"""

from __future__ import annotations

from ipaddress import (
    IPv4Address,
    IPv4Interface,
    IPv4Network,
    IPv6Address,
    IPv6Interface,
    IPv6Network,
)
from typing import Literal

from local_ccm.records import dataclass

IPAddress = IPv4Address | IPv6Address
SCOPES = {0: "global", 200: "site", 253: "link", 254: "host", 255: "nowhere"}


class NetlinkError(OSError):
    """A netlink request failed; ``errno`` is the kernel's (positive) error number."""


class NoRouteError(NetlinkError):
    """The kernel has no usable route to the destination (ENETUNREACH, EHOSTUNREACH, ...)."""


class MalformedMessageError(ValueError):
    """The kernel sent bytes that do not parse as the expected message."""


@dataclass(frozen=True)
class Route:
    """One route: a reply to RTM_GETROUTE, or a route change notification."""

    family: int  # 4 or 6
    dst: IPv4Network | IPv6Network
    type: str  # "unicast", "local", "unreachable", ... (ROUTE_TYPES)
    table: int
    protocol: int
    scope: int
    oif: int | None
    ifname: str | None
    gateway: IPAddress | None
    prefsrc: IPAddress | None
    priority: int | None


@dataclass(frozen=True)
class Address:
    """One interface address from RTM_GETADDR / RTM_NEWADDR / RTM_DELADDR."""

    family: int  # 4 or 6
    ifindex: int
    ifname: str | None  # None only in change notifications for IPv6 (no IFA_LABEL)
    address: IPv4Interface | IPv6Interface
    peer: IPAddress | None  # point-to-point peer, when it differs from the local address
    scope: int
    label: str | None  # IPv4 only, e.g. "eth0:1"
    flags: frozenset[str]
    valid_lft: int | None  # seconds; None = forever
    preferred_lft: int | None  # seconds; None = forever; 0 = deprecated

    @property
    def prefixlen(self) -> int:
        return self.address.network.prefixlen

    @property
    def scope_name(self) -> str:
        return SCOPES.get(self.scope, str(self.scope))


@dataclass(frozen=True)
class Link:
    index: int
    name: str
    flags: frozenset[str]  # LINK_FLAGS names: "up", "running", "loopback", "lower_up", ...
    kind: str | None  # IFLA_INFO_KIND: "veth", "bridge", "wireguard", ...; None for physical
    operstate: str  # OPERSTATES name
    mtu: int | None
    master: int | None
    mac: bytes | None = None  # IFLA_ADDRESS: 6 bytes on Ethernet; None when the link has none

    @property
    def is_up(self) -> bool:
        return "up" in self.flags

    @property
    def is_running(self) -> bool:
        return "running" in self.flags

    @property
    def is_loopback(self) -> bool:
        return "loopback" in self.flags


ChangeKind = Literal["link", "address", "route", "resync"]


@dataclass(frozen=True)
class Change:
    """A change notification. ``resync`` means events were lost: the caller must re-read."""

    kind: ChangeKind
    deleted: bool = False
    link: Link | None = None
    address: Address | None = None
    route: Route | None = None

"""An in-memory `NetlinkReader`: routes, addresses and links the test sets."""

from __future__ import annotations

from dataclasses import dataclass, field

from local_ccm import netlink
from local_ccm.agent.core.config import IPAddress


@dataclass
class FakeNetlink:
    routes: dict[IPAddress, netlink.Route | OSError] = field(default_factory=dict)
    addrs: list[netlink.Address] | OSError = field(default_factory=list)
    links_: list[netlink.Link] = field(default_factory=list)
    lookups: list[IPAddress] = field(default_factory=list)

    def route_get(self, dst: IPAddress) -> netlink.Route:
        self.lookups.append(dst)
        result = self.routes[dst]
        if isinstance(result, OSError):
            raise result
        return result

    def addresses(self) -> list[netlink.Address]:
        if isinstance(self.addrs, OSError):
            raise self.addrs
        return self.addrs

    def links(self) -> list[netlink.Link]:
        return self.links_

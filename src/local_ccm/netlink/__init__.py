"""Route lookups, address and link dumps and change notifications over rtnetlink.

Standard library only: pyroute2's import alone costs more memory than the agent's budget
allows (docs/design.md). ``model`` (what it reports) and ``messages`` (the wire format) are
pure; ``socket`` is the adapter; ``netns`` runs socket creation inside a named network
namespace.
"""

from local_ccm.netlink.model import Address, Change, Link, NetlinkError, NoRouteError, Route
from local_ccm.netlink.netns import run_in_netns
from local_ccm.netlink.socket import Monitor, dump_addresses, dump_links, route_get

__all__ = [
    "Address",
    "Change",
    "Link",
    "Monitor",
    "NetlinkError",
    "NoRouteError",
    "Route",
    "dump_addresses",
    "dump_links",
    "route_get",
    "run_in_netns",
]

"""Route lookups, address and link dumps and change notifications over rtnetlink.

Standard library only: pyroute2's import alone costs more memory than the agent's budget
allows (docs/design.md). ``messages`` is pure; ``socket`` is the
adapter; ``netns`` runs socket creation inside a named network namespace.
"""

from local_ccm.netlink.messages import (
    DEFAULT_GROUPS,
    RTMGRP_IPV4_IFADDR,
    RTMGRP_IPV4_ROUTE,
    RTMGRP_IPV6_IFADDR,
    RTMGRP_IPV6_ROUTE,
    RTMGRP_LINK,
    Address,
    Change,
    Link,
    NetlinkError,
    NoRouteError,
    Route,
)
from local_ccm.netlink.netns import run_in_netns
from local_ccm.netlink.socket import Monitor, dump_addresses, dump_links, route_get

__all__ = [
    "DEFAULT_GROUPS",
    "RTMGRP_IPV4_IFADDR",
    "RTMGRP_IPV4_ROUTE",
    "RTMGRP_IPV6_IFADDR",
    "RTMGRP_IPV6_ROUTE",
    "RTMGRP_LINK",
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

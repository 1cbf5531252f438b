"""Detection adapter: asks the kernel (``local_ccm.netlink``) for routes, addresses and links,
and hands plain data to the pure selection in ``agent.core.addresses``.

Only reads: ``RTM_GETROUTE`` for each configured target and one ``RTM_GETADDR`` /
``RTM_GETLINK`` dump per pass, so no capability is needed and nothing is sent to a target.
``netns`` (tests only) runs the netlink sockets in a named network namespace.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from local_ccm import netlink
from local_ccm.agent.core.candidates import (
    DISABLED,
    Candidate,
    Detected,
    Detection,
    DetectorKey,
    Failed,
    LookupFailed,
    RouteLookup,
    Verdict,
    choose_address,
    evaluate_candidates,
)
from local_ccm.agent.core.config import (
    ADDRESS_TYPES,
    DETECTORS,
    AddressType,
    AgentConfig,
    IPAddress,
    family_name,
)
from local_ccm.records import dataclass

log = logging.getLogger(__name__)


class NetlinkReader(Protocol):
    """The three kernel reads detection needs; the seam for unit tests."""

    def route_get(self, dst: IPAddress) -> netlink.Route: ...

    def addresses(self) -> list[netlink.Address]: ...

    def links(self) -> list[netlink.Link]: ...


@dataclass(frozen=True)
class KernelNetlink:
    """:class:`NetlinkReader` over rtnetlink, in the current or a named network namespace."""

    netns: str | None = None

    def route_get(self, dst: IPAddress) -> netlink.Route:
        return netlink.route_get(dst, netns=self.netns)

    def addresses(self) -> list[netlink.Address]:
        return netlink.dump_addresses(netns=self.netns)

    def links(self) -> list[netlink.Link]:
        return netlink.dump_links(netns=self.netns)


@dataclass(frozen=True)
class DetectionReport:
    """One pass of detection: a result per (type, family) plus what detect mode prints."""

    results: Detected  # all four detectors, Disabled included
    candidates: tuple[Candidate, ...]
    verdicts: Mapping[AddressType, tuple[Verdict, ...]]  # hygiene per type, for detect mode
    lookups: Mapping[IPAddress, RouteLookup | LookupFailed]
    dump_failed: bool = False  # the address or link dump failed (every detector Failed)


def detect_addresses(
    config: AgentConfig,
    *,
    netns: str | None = None,
    reader: NetlinkReader | None = None,
    candidates: tuple[Candidate, ...] | None = None,
    previous: DetectionReport | None = None,
) -> DetectionReport:
    """Run every detector once: the route lookups always, the address and link dumps unless
    `candidates` (an earlier dump still known to be current) are given. `previous`, the
    report of the same `config` these candidates came with, is returned as it is when the
    lookups answer as they did then: every result follows from the two. Never raises for
    kernel errors: they become Failed."""
    reader = reader or KernelNetlink(netns)
    lookups = {t: lookup_route(reader, t) for t in _targets(config)}
    if previous is not None and candidates is previous.candidates and lookups == previous.lookups:
        return previous
    try:
        candidates = read_candidates(reader) if candidates is None else candidates
    except OSError as exc:
        log.warning("netlink address dump failed: %s", exc)
        failed = Failed("netlink_error", f"address dump failed: {exc}")
        failures = {(k, f): failed if config.enabled(k, f) else DISABLED for k, f in DETECTORS}
        empty = dict.fromkeys(ADDRESS_TYPES, ())
        return DetectionReport(failures, (), empty, lookups, dump_failed=True)
    results: dict[DetectorKey, Detection] = {}
    for kind, family in DETECTORS:
        target = config.settings(kind).target(family)
        lookup = lookups.get(target) if target is not None else None
        results[kind, family] = choose_address(kind, family, config, lookup, candidates)
        log.debug("detector %s %s: %s", kind, family_name(family), results[kind, family])
    verdicts = {k: evaluate_candidates(k, config, candidates) for k in ADDRESS_TYPES}
    return DetectionReport(results, candidates, verdicts, lookups)


def _targets(config: AgentConfig) -> list[IPAddress]:
    """Each configured target once, even if both types use it."""
    targets = (config.settings(k).target(f) for k, f in DETECTORS)
    return list(dict.fromkeys(t for t in targets if t is not None))


def lookup_route(reader: NetlinkReader, target: IPAddress) -> RouteLookup | LookupFailed:
    """``ip route get <target>``: the kernel's decision only, nothing is sent."""
    try:
        route = reader.route_get(target)
    except netlink.NoRouteError as exc:
        log.debug("route lookup %s: %s", target, exc.strerror)
        return LookupFailed(target, "no_route", exc.strerror or str(exc))
    except OSError as exc:
        log.warning("route lookup %s failed: %s", target, exc)
        return LookupFailed(target, "netlink_error", exc.strerror or str(exc))
    log.debug(
        "route lookup %s: type=%s oif=%s(%s) prefsrc=%s",
        target, route.type, route.oif, route.ifname, route.prefsrc,
    )  # fmt: skip
    return RouteLookup(target, route.type, route.prefsrc, route.oif, route.ifname)


def read_candidates(reader: NetlinkReader) -> tuple[Candidate, ...]:
    """Every address joined with its link (RTM_GETADDR + RTM_GETLINK)."""
    links = {link.index: link for link in reader.links()}
    return tuple(to_candidate(a, links.get(a.ifindex)) for a in reader.addresses())


def to_candidate(address: netlink.Address, link: netlink.Link | None) -> Candidate:
    """A link that vanished between the two dumps counts as not present."""
    name = address.ifname or (link.name if link else None) or f"if{address.ifindex}"
    return Candidate(
        ifname=name,
        ifindex=address.ifindex,
        interface=address.address,
        flags=address.flags,
        preferred_lft=address.preferred_lft,
        scope=address.scope_name,
        link_up=link.is_up if link else False,
        operstate=link.operstate if link else "notpresent",
    )

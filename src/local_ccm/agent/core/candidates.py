"""Address candidates: hygiene and one address per detector (route, egress interface, CIDRs).

Pure, no I/O, no clock. The netlink adapter (``agent.detect``) turns kernel state into
:class:`Candidate` and :class:`RouteLookup` values; everything that decides lives here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from ipaddress import IPv4Interface, IPv6Interface
from typing import Literal

from local_ccm.agent.core.config import (
    INTERNAL,
    AddressType,
    AgentConfig,
    Family,
    IPAddress,
    TypeSettings,
    family_name,
)
from local_ccm.ifnames import interface_matches
from local_ccm.records import dataclass

FailReason = Literal["no_route", "no_eligible_address", "netlink_error"]
Source = Literal["route", "interface", "cidr"]
DetectorKey = tuple[AddressType, Family]


# ------------------------------------------------------------------ detection results
@dataclass(frozen=True)
class Found:
    address: IPAddress
    source: Source = "route"
    interface: str | None = None


@dataclass(frozen=True)
class Failed:
    reason: FailReason
    detail: str = ""


@dataclass(frozen=True)
class Disabled:
    """The configuration asks for no address of this (type, family): not a failure."""


DISABLED = Disabled()
Detection = Found | Failed | Disabled
Detected = Mapping[DetectorKey, Detection]  # one pass's results, by detector


@dataclass(frozen=True)
class RouteLookup:
    """The kernel's answer to ``ip route get <target>``."""

    target: IPAddress
    route_type: str  # "unicast", "local", ...
    prefsrc: IPAddress | None
    oif: int | None
    ifname: str | None = None


@dataclass(frozen=True)
class LookupFailed:
    target: IPAddress
    reason: Literal["no_route", "netlink_error"]
    detail: str


@dataclass(frozen=True)
class Candidate:
    """One interface address joined with its link's state (RTM_GETADDR + RTM_GETLINK)."""

    ifname: str
    ifindex: int
    interface: IPv4Interface | IPv6Interface
    flags: frozenset[str] = frozenset()  # netlink names: "secondary", "permanent", "tentative"...
    preferred_lft: int | None = None  # None = forever
    scope: str = "global"
    link_up: bool = True
    operstate: str = "up"

    @property
    def ip(self) -> IPAddress:
        return self.interface.ip

    @property
    def family(self) -> int:
        return self.interface.version


@dataclass(frozen=True)
class Verdict:
    candidate: Candidate
    rejection: str | None  # None = eligible; otherwise the reason detect mode prints


# ------------------------------------------------------------------ hygiene
_DOWN_OPERSTATES = frozenset({"down", "lowerlayerdown", "notpresent"})
# dadfailed first: the kernel keeps a failed address tentative too, and it is the better reason.
_UNSTABLE_V6_FLAGS = ("dadfailed", "tentative", "optimistic", "deprecated", "temporary")


def evaluate_candidates(
    kind: AddressType, config: AgentConfig, candidates: Iterable[Candidate]
) -> tuple[Verdict, ...]:
    """Every candidate with the first hygiene rule it breaks for ``kind``, in input order."""
    base = [(c, _base_rejection(c, kind, config)) for c in candidates]
    # A VIP's sibling may itself be no candidate (deprecated, tentative, outside the CIDRs): it
    # still shows the /32 or /128 beside it is not the interface's own address. Link-local and
    # loopback siblings do not count (every IPv6 interface has an fe80::/64).
    siblings = [c for c, _ in base if _scope_rejection(c) is None]
    return tuple(Verdict(c, why or _vip_rejection(c, siblings, config)) for c, why in base)


def _base_rejection(c: Candidate, kind: AddressType, config: AgentConfig) -> str | None:
    """Rules 1-5: link state, interface names, scope, IPv6 flags, CIDR filter."""
    return (
        _link_rejection(c)
        or _interface_rejection(c.ifname, kind, config)
        or _scope_rejection(c)
        or _flag_rejection(c)
        or _cidr_rejection(c.ip, kind, config.settings(kind))
    )


def _link_rejection(c: Candidate) -> str | None:
    if not c.link_up:
        return "interface down"
    return f"interface {c.operstate}" if c.operstate in _DOWN_OPERSTATES else None


def _interface_rejection(name: str, kind: AddressType, config: AgentConfig) -> str | None:
    excluded = next((p for p in config.interface_exclude if interface_matches(name, p)), None)
    if excluded is not None:  # exclusion always wins over the type's interface list
        return f"interface matches {excluded}"
    wanted = config.settings(kind).interfaces
    if wanted and not any(interface_matches(name, p) for p in wanted):
        return f"interface not in --{_flag_prefix(kind)}-interfaces"
    return None


def _scope_rejection(c: Candidate) -> str | None:
    ip = c.ip
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_unspecified or ip.is_multicast:
        return "unspecified" if ip.is_unspecified else "multicast"
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return "ipv4-mapped"
    return None if c.scope == "global" else f"scope {c.scope}"


def _flag_rejection(c: Candidate) -> str | None:
    if c.family != 6:
        return None
    # A node address must be stable: kernel source selection may prefer a temporary (privacy)
    # address, and a deprecated one is on its way out.
    bad = next((f for f in _UNSTABLE_V6_FLAGS if f in c.flags), None)
    if bad is None and c.preferred_lft == 0:
        bad = "deprecated"
    return bad


def _cidr_rejection(ip: IPAddress, kind: AddressType, settings: TypeSettings) -> str | None:
    excluded = next((n for n in settings.exclude if ip in n), None)
    if excluded is not None:
        return f"excluded by !{excluded}"
    positives = settings.positive_cidrs(ip.version)
    if positives and not any(ip in n for n in positives):
        return f"not in --{_flag_prefix(kind)}-cidrs"
    return None


def _vip_rejection(c: Candidate, siblings: Sequence[Candidate], config: AgentConfig) -> str | None:
    """Rule 6: kube-vip / keepalived VIPs (a /32 or /128 added for good beside the interface's
    own, shorter-prefix address), but keep a host whose only address is a /32, and a /128 with
    a lease (a DHCPv6 address has a finite lifetime; a VIP is added without one)."""
    if config.include_vips:
        return None
    if c.family == 4 and "secondary" in c.flags:
        return "vip (secondary address)"
    leased = c.preferred_lft is not None and c.preferred_lft > 0
    if (
        c.interface.network.prefixlen == c.interface.max_prefixlen
        and not leased
        and any(
            o.ifindex == c.ifindex
            and o.family == c.family
            and o.interface.network.prefixlen < c.interface.network.prefixlen
            for o in siblings
        )
    ):
        return "vip"
    return None


def _flag_prefix(kind: AddressType) -> str:
    return "internal-ip" if kind == INTERNAL else "external-ip"


# ------------------------------------------------------------------ selection
def selection_key(c: Candidate, settings: TypeSettings) -> tuple[int, int, bool, int, int]:
    """CIDR position, interface-pattern position, static first, ifindex, value."""
    cidr_rank = next((i for i, n in enumerate(settings.include) if c.ip in n), 0)
    if_rank = next(
        (i for i, p in enumerate(settings.interfaces) if interface_matches(c.ifname, p)), 0
    )
    dynamic = "secondary" in c.flags if c.family == 4 else "permanent" not in c.flags
    return (cidr_rank, if_rank, dynamic, c.ifindex, int(c.ip))


def choose_address(
    kind: AddressType,
    family: Family,
    config: AgentConfig,
    lookup: RouteLookup | LookupFailed | None,
    candidates: Sequence[Candidate],
) -> Detection:
    """One detector's result: route source, else the egress interface, else CIDR selection."""
    settings = config.settings(kind)
    if not settings.enabled(family):
        return DISABLED
    verdicts = [
        v for v in evaluate_candidates(kind, config, candidates) if v.candidate.family == family
    ]
    eligible = sorted(
        (v.candidate for v in verdicts if v.rejection is None),
        key=lambda c: selection_key(c, settings),
    )
    if settings.target(family) is None:
        return _first(eligible, "cidr", f"no eligible {family_name(family)} address")
    if lookup is None or isinstance(lookup, LookupFailed):
        detail = lookup.detail if lookup is not None else "no route lookup was made"
        if lookup is not None and lookup.reason == "no_route" and settings.positive_cidrs(family):
            return _first(eligible, "cidr", detail)  # as when the route's source is refused
        return Failed(lookup.reason if lookup is not None else "netlink_error", detail)
    return _from_route(lookup, verdicts, eligible, settings, family)


def _from_route(
    lookup: RouteLookup,
    verdicts: Sequence[Verdict],
    eligible: Sequence[Candidate],
    settings: TypeSettings,
    family: Family,
) -> Detection:
    if lookup.route_type not in ("unicast", "local"):
        return Failed("no_route", f"route to {lookup.target} has type {lookup.route_type}")
    # A target that is one of our own addresses gives a local route whose source is the target.
    src = lookup.prefsrc or (lookup.target if lookup.route_type == "local" else None)
    mine = sorted(
        (v for v in verdicts if v.candidate.ip == src),
        key=lambda v: (v.candidate.ifindex != lookup.oif, v.candidate.ifindex),
    )
    if mine and mine[0].rejection is None:
        return Found(mine[0].candidate.ip, "route", mine[0].candidate.ifname)
    why = f"source {src} {mine[0].rejection}" if mine else f"route has no usable source ({src})"
    on_oif = [c for c in eligible if c.ifindex == lookup.oif]
    if on_oif:
        return Found(on_oif[0].ip, "interface", on_oif[0].ifname)
    if settings.positive_cidrs(family):
        return _first(eligible, "cidr", why)
    return Failed("no_eligible_address", f"route to {lookup.target} via {lookup.ifname}: {why}")


def _first(eligible: Sequence[Candidate], source: Source, why: str) -> Detection:
    if not eligible:
        return Failed("no_eligible_address", why)
    return Found(eligible[0].ip, source, eligible[0].ifname)

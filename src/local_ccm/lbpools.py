"""LoadBalancer address pools: the model, and `LoadBalancerIPPool` objects parsed into it. Read
by `service-lb-ipam`, which allocates from the pools, and by the agent, which announces them.

Pure, no I/O. Addresses are kept as inclusive integer ranges per family, never as lists, so a
/64 pool costs two integers. Parsing lists every problem of an object, never just the first.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from types import MappingProxyType
from typing import Any, NamedTuple

from local_ccm.ifnames import parse_glob
from local_ccm.labels import LabelSelector, Operator, Requirement, label_value, qualified_name
from local_ccm.records import dataclass
from local_ccm.validate import IPV4_MAPPED, ValidationError

GROUP = "lb.local-ccm.io"
KIND = "LoadBalancerIPPool"
_OPERATORS: Mapping[str, Operator] = MappingProxyType(
    {"In": "In", "NotIn": "NotIn", "Exists": "Exists", "DoesNotExist": "DoesNotExist"}
)
SELECTOR_OPERATORS = tuple(_OPERATORS)
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressRange(NamedTuple):
    """Addresses `first`..`last` (inclusive) of one IP family, as integers."""

    version: int
    first: int
    last: int

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def overlaps(self, other: AddressRange) -> bool:
        return (
            self.version == other.version and self.first <= other.last and other.first <= self.last
        )

    def __str__(self) -> str:
        first = ipaddress.ip_address(self.first if self.version == 4 else _v6(self.first))
        last = ipaddress.ip_address(self.last if self.version == 4 else _v6(self.last))
        return str(first) if self.first == self.last else f"{first}-{last}"


def _v6(value: int) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(value)


def address_key(address: IPAddress) -> tuple[int, int]:
    """(family, integer): how the ledger and the ranges name one address."""
    return address.version, int(address)


def to_address(version: int, value: int) -> IPAddress:
    return ipaddress.IPv4Address(value) if version == 4 else ipaddress.IPv6Address(value)


def is_buggy(version: int, value: int) -> bool:
    """An IPv4 address ending in .0 or .255: some CPE firmwares take it for a network or
    broadcast address and drop its packets (MetalLB's `ipConfusesBuggyFirmwares`)."""
    return version == 4 and value % 256 in (0, 255)


def buggy_count(span: AddressRange) -> int:
    """How many addresses of `span` are `is_buggy`, counted, never listed."""
    if span.version != 4:
        return 0
    return sum((span.last - end) // 256 - (span.first - 1 - end) // 256 for end in (0, 255))


@dataclass(frozen=True)
class L2Announcement:
    """How the agents announce a pool's addresses on layer 2 (ARP, NDP): on the Nodes
    `node_selector` matches (None: every Node), on the interfaces whose names match one of
    `interfaces` (shell-style globs; none: on each Node, the interfaces whose on-link prefix
    contains the address)."""

    node_selector: LabelSelector | None = None
    interfaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pool:
    """What the allocator needs of one pool, whichever source it came from.

    `namespaces` None means every namespace; `excluded_namespaces` drops some (a kube-vip
    global pool does not serve a namespace that has a pool of its own). `allow_share` lets
    Services of the pool share an IPv4 address without a sharing key (kube-vip's allow-share,
    which shares IPv4 only), except in the namespaces of `allow_share_except`, where the
    answer is the opposite (kube-vip's `allow-share-<namespace>` on the global pool).
    `avoid_buggy_ips` takes every IPv4 address ending in .0 or .255 out of the pool
    (MetalLB's avoidBuggyIPs; kube-vip-cloud-provider always skips them).
    `l2_announcement` None: the agents do not announce the pool's addresses; the allocator
    never reads it.
    """

    name: str
    ranges: tuple[AddressRange, ...]  # IPv4 first, sorted, disjoint
    priority: int = 0
    disabled: bool = False
    service_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    namespaces: frozenset[str] | None = None
    excluded_namespaces: frozenset[str] = frozenset()
    allow_share: bool = False
    descending: bool = False
    avoid_buggy_ips: bool = False
    allow_share_except: frozenset[str] = frozenset()
    l2_announcement: L2Announcement | None = None

    @property
    def families(self) -> tuple[int, ...]:
        return tuple(sorted({r.version for r in self.ranges}))

    def capacity(self, version: int) -> int:
        spans = [r for r in self.ranges if r.version == version]
        skipped = sum(buggy_count(r) for r in spans) if self.avoid_buggy_ips else 0
        return sum(r.size for r in spans) - skipped

    def contains(self, address: IPAddress) -> bool:
        version, value = address_key(address)
        if self.avoid_buggy_ips and is_buggy(version, value):
            return False
        return any(r.version == version and r.first <= value <= r.last for r in self.ranges)

    def shares(self, namespace: str, version: int) -> bool:
        """Whether a Service of `namespace` may share a `version` address of this pool with
        the pool's other sharing Services without a sharing key: never in a namespace the pool
        does not serve (a kube-vip namespace pool overlapping the global one must not make a
        Service the global pool gave an address shareable)."""
        if namespace in self.excluded_namespaces or (
            self.namespaces is not None and namespace not in self.namespaces
        ):
            return False
        return version == 4 and self.allow_share != (namespace in self.allow_share_except)

    def selects(
        self, labels: Mapping[str, str], namespace: str, namespace_labels: Mapping[str, str]
    ) -> bool:
        """Whether a Service with these labels, in this namespace, may take from the pool."""
        if self.disabled or namespace in self.excluded_namespaces:
            return False
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return _matches(self.service_selector, labels) and _matches(
            self.namespace_selector, namespace_labels
        )

    def order_key(self) -> tuple[int, int, str]:
        """Lower priority first; a pool scoped to some namespaces or Services (a kube-vip
        namespace pool, a non-empty selector) before a cluster-wide one, as MetalLB prefers the
        pools pinned to a Service and kube-vip a namespace's own range; then name."""
        scoped = self.namespaces is not None or any(
            s is not None and s.requirements for s in (self.service_selector,
                                                        self.namespace_selector))  # fmt: skip
        return self.priority, 0 if scoped else 1, self.name


def _matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    return selector is None or selector.matches(labels)


def ordered(pools: Iterable[Pool]) -> list[Pool]:
    """Pools in the order the allocator tries them."""
    return sorted(pools, key=Pool.order_key)


@dataclass(frozen=True)
class InvalidPool:
    """A pool object that cannot be used, with every problem found in it."""

    name: str
    problems: tuple[str, ...] = field(default=())


# ---------------------------------------------------------------- addresses


def parse_address_text(text: str, *, allow_first_last: bool) -> AddressRange | str:
    """A CIDR (`10.0.0.0/24`) or a range (`10.0.0.10-10.0.0.20`), or the problem with it.

    Without `allow_first_last` a CIDR loses its first and last address (the network and
    broadcast-like ones); a /31, /32, /127 or /128 keeps all. MetalLB's avoidBuggyIPs is
    another rule (every IPv4 .0 and .255): `Pool.avoid_buggy_ips`.
    """
    text = text.strip()
    if "-" in text:
        parsed = _parse_range(text)
    else:
        try:
            network = ipaddress.ip_network(text, strict=True)
        except ValueError as error:
            return f"{text!r} is neither a CIDR nor a range: {error}"
        first, last = int(network.network_address), int(network.broadcast_address)
        if not allow_first_last and network.max_prefixlen - network.prefixlen > 1:
            first, last = first + 1, last - 1
        parsed = AddressRange(network.version, first, last)
    return parsed if isinstance(parsed, str) else unusable(text, parsed) or parsed


_MAPPED_FIRST, _MAPPED_LAST = int(IPV4_MAPPED.network_address), int(IPV4_MAPPED.broadcast_address)


def unusable(text: str, span: AddressRange) -> str | None:
    """Why no Service may get an address of the entry `text` (`span`), or None. The API server
    refuses a zone (`fe80::1%eth0`) and an IPv4-mapped IPv6 address in a Service's
    `status.loadBalancer.ingress`, so a pool holding them would hand out addresses whose write
    can never land."""
    if "%" in text:
        return f"{text!r} has a zone ('%'): a Service address cannot carry one"
    if span.version == 6 and span.first <= _MAPPED_LAST and span.last >= _MAPPED_FIRST:
        return (f"{text!r} holds IPv4-mapped IPv6 addresses (::ffff:0:0/96), which the API "
                "server refuses as Service addresses")  # fmt: skip
    return None


def _parse_range(text: str) -> AddressRange | str:
    start_text, _, end_text = text.partition("-")
    try:
        start = ipaddress.ip_address(start_text.strip())
        end = ipaddress.ip_address(end_text.strip())
    except ValueError as error:
        return f"{text!r} is not a range of two addresses: {error}"
    if start.version != end.version:
        return f"{text!r} mixes IPv4 and IPv6"
    if int(start) > int(end):
        return f"{text!r} starts after it ends"
    return AddressRange(start.version, int(start), int(end))


def parse_addresses(
    texts: Sequence[str], where: str, *, allow_first_last: bool
) -> tuple[tuple[AddressRange, ...], list[str]]:
    """Every entry parsed, overlapping entries merged; problems name the entry."""
    ranges: list[AddressRange] = []
    problems: list[str] = []
    for index, text in enumerate(texts):
        parsed = parse_address_text(text, allow_first_last=allow_first_last)
        if isinstance(parsed, str):
            problems.append(f"{where}[{index}]: {parsed}")
        else:
            ranges.append(parsed)
    return merge(ranges), problems


POOL_ANNOTATIONS = (
    "lb.local-ccm.io/pool",
    "metallb.io/address-pool",
    "metallb.universe.tf/address-pool",
)
"""The one pool a Service takes from (it must still select the Service); the allocator and the
L2 announcer read it alike, so both put an address in the same pool."""


def named_pool(annotations: Mapping[str, str]) -> tuple[str | None, list[str]]:
    """The pool the Service's annotations name (None: any), and a problem if they disagree."""
    names = {k: str(annotations[k]).strip() for k in POOL_ANNOTATIONS
             if str(annotations.get(k) or "").strip()}  # fmt: skip
    problems = []
    if len(set(names.values())) > 1:
        problems.append("the pool annotations disagree: " + ", ".join(sorted(names)))
    return next(iter(names.values()), None), problems


def selecting_pools(
    every: Iterable[Pool],
    labels: Mapping[str, str],
    namespace: str,
    namespace_labels: Mapping[str, str],
    named: str | None,
) -> list[Pool]:
    """The pools of `every` (in order) that select a Service with these labels in this
    namespace, narrowed to the one it names (`named_pool`) if it names one. With `home_pool`,
    the one rule the allocator and the L2 announcer place an address by, so that they never
    disagree about an address's pool."""
    wanted = [p for p in every if named in (None, p.name)]
    return [p for p in wanted if p.selects(labels, namespace, namespace_labels)]


def pool_of(address: IPAddress, pools: Iterable[Pool]) -> Pool | None:
    """The first of `pools` whose ranges hold the address."""
    return next((p for p in pools if p.contains(address)), None)


def home_pool(address: IPAddress, selecting: Sequence[Pool], every: Sequence[Pool]) -> Pool | None:
    """The pool a held address counts as in: a selecting pool first, else any pool holding it
    (its sharing group, and whether it is announced, come from that pool)."""
    return pool_of(address, selecting) or pool_of(address, every)


def merge(ranges: Iterable[AddressRange]) -> tuple[AddressRange, ...]:
    """Sorted (IPv4 first), with overlapping or adjacent ranges joined."""
    merged: list[AddressRange] = []
    for item in sorted(ranges):
        last = merged[-1] if merged else None
        if last is not None and last.version == item.version and item.first <= last.last + 1:
            merged[-1] = AddressRange(item.version, last.first, max(last.last, item.last))
        else:
            merged.append(item)
    return tuple(merged)


# ---------------------------------------------------------------- label selectors


def parse_label_selector(raw: object, where: str, problems: list[str]) -> LabelSelector | None:
    """A `metav1.LabelSelector` (matchLabels + matchExpressions); None when absent.

    An empty selector selects everything, as in Kubernetes.
    """
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: must be an object")
        return None
    requirements = []
    for key, value in (raw.get("matchLabels") or {}).items():
        at = f"{where}.matchLabels[{key!r}]"
        if _label_problem(at, str(key), (str(value),), problems):
            requirements.append(Requirement(str(key), "In", (str(value),)))
    expressions = raw.get("matchExpressions") or []
    if not isinstance(expressions, list):
        problems.append(f"{where}.matchExpressions: must be a list")
        expressions = []
    for index, item in enumerate(expressions):
        requirement = _expression(item, f"{where}.matchExpressions[{index}]", problems)
        if requirement is not None:
            requirements.append(requirement)
    return LabelSelector(tuple(requirements))


def _expression(raw: object, where: str, problems: list[str]) -> Requirement | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: must be an object")
        return None
    key, operator, values = raw.get("key"), raw.get("operator"), raw.get("values") or []
    found = len(problems)
    if not isinstance(key, str) or not key:
        problems.append(f"{where}.key: must be a non-empty string")
    if operator not in SELECTOR_OPERATORS:
        problems.append(f"{where}.operator: {operator!r} is not one of {SELECTOR_OPERATORS}")
    elif (operator in ("In", "NotIn")) != bool(values):
        problems.append(
            f"{where}.values: In and NotIn need values, Exists and DoesNotExist take none"
        )
    if isinstance(key, str) and key:
        _label_problem(where, key, tuple(str(v) for v in values), problems)
    if len(problems) > found or operator not in SELECTOR_OPERATORS:
        return None
    return Requirement(str(key), _OPERATORS[operator], tuple(str(v) for v in values))


def _label_problem(where: str, key: str, values: tuple[str, ...], problems: list[str]) -> bool:
    """Whether `key` and `values` are a label key and values, as the API server's selector
    validation requires; each problem added (a bad key would select nothing, or, under
    NotIn or DoesNotExist, everything)."""
    before = len(problems)
    for check, text in ((qualified_name, key), *((label_value, v) for v in values)):
        try:
            check(text)
        except ValidationError as error:
            problems.append(f"{where}: {error}")
    return len(problems) == before


# ---------------------------------------------------------------- the CRD object


def parse_pool(obj: Mapping[str, Any]) -> Pool | InvalidPool:
    """A `LoadBalancerIPPool` object as a `Pool`, or an `InvalidPool` listing every problem."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    spec = obj.get("spec") or {}
    problems: list[str] = [] if name else ["metadata.name: missing"]
    allow = _flag(spec, "allowFirstAndLast", problems)
    avoid_buggy = _flag(spec, "avoidBuggyIPs", problems)
    disabled = _flag(spec, "disabled", problems)
    texts = spec.get("addresses")
    if not isinstance(texts, list) or not texts:
        problems.append("spec.addresses: must be a non-empty list")
        texts = []
    ranges, address_problems = parse_addresses(
        [str(t) for t in texts], "spec.addresses", allow_first_last=allow
    )
    problems += address_problems
    priority = spec.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        problems.append(f"spec.priority: {priority!r} is not an integer")
        priority = 0
    services = parse_label_selector(spec.get("serviceSelector"), "spec.serviceSelector", problems)
    spaces = parse_label_selector(spec.get("namespaceSelector"), "spec.namespaceSelector", problems)
    l2 = parse_l2_announcement(spec.get("l2Announcement"), "spec.l2Announcement", problems)
    if problems:
        return InvalidPool(name, tuple(problems))
    return Pool(
        name,
        ranges,
        priority,
        disabled,
        services,
        spaces,
        avoid_buggy_ips=avoid_buggy,
        l2_announcement=l2,
    )


def parse_l2_announcement(raw: object, where: str, problems: list[str]) -> L2Announcement | None:
    """`spec.l2Announcement`: None when absent (the pool is not announced); `{}` announces on
    every Node, on the interfaces on the address's prefix."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: must be an object")
        return None
    selector = parse_label_selector(raw.get("nodeSelector"), f"{where}.nodeSelector", problems)
    return L2Announcement(selector, _globs(raw.get("interfaces"), f"{where}.interfaces", problems))


def _globs(raw: object, where: str, problems: list[str]) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(f"{where}: must be a list")
        return ()
    found: list[str] = []
    for index, item in enumerate(raw):
        try:
            if not isinstance(item, str):
                raise ValidationError(f"{item!r} is not a string")
            found.append(parse_glob(item))
        except ValidationError as error:
            problems.append(f"{where}[{index}]: {error}")
    return tuple(dict.fromkeys(found))


def _flag(spec: Mapping[str, Any], key: str, problems: list[str]) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        problems.append(f"spec.{key}: {value!r} is not a boolean")
        return False
    return value

"""Views of ClusterCIDRs and Nodes for the node IPAM controller.

Pure, no I/O. `project_*` functions turn API dicts into frozen dataclasses; a ClusterCIDR that
cannot be used comes back as an `InvalidClusterCIDR` value carrying the reason, never as
an exception, because objects stored under an older CRD may violate today's rules.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any, Final, NamedTuple

from local_ccm.ipam.core.cidrset import IPV6_MAX_BLOCKS, IPNetwork
from local_ccm.ipam.core.selector import NodeSelector, SelectorError, parse_node_selector
from local_ccm.records import dataclass
from local_ccm.validate import IPV4_MAPPED

FINALIZER: Final = "networking.x-k8s.io/cluster-cidr-finalizer"
DEFAULT_POOL_NAME: Final = "default-cluster-cidr"
"""The in-memory pool built from `--cluster-cidr` (the name upstream's dormant code used)."""

_CIDR_TEXT = re.compile(r"[0-9A-Fa-f:.]+/0*[0-9]{1,3}")
_LEADING_ZEROS = re.compile(r"(?<![0-9A-Fa-f])0+(?=[0-9])")  # 010 -> 10, 000 -> 0, never 0x


class PoolFamily(NamedTuple):
    """One family of a pool: the (normalised) range and the per-Node block prefix."""

    network: IPNetwork
    block_prefix: int

    @property
    def version(self) -> int:
        return self.network.version

    @property
    def block_count(self) -> int:
        return 1 << (self.block_prefix - self.network.prefixlen)


@dataclass(frozen=True)
class Pool:
    """What the allocator needs of a pool. `selector` None = catch-all."""

    name: str
    families: tuple[PoolFamily, ...]  # IPv4 first, at most one per family
    selector: NodeSelector | None = None
    is_default: bool = False

    def family(self, version: int) -> PoolFamily | None:
        return next((f for f in self.families if f.version == version), None)

    @property
    def capacity(self) -> int:
        """Static capacity: the smallest block count of the families (ranking key P1)."""
        return min(f.block_count for f in self.families)


@dataclass(frozen=True, kw_only=True)
class ClusterCIDRMeta:
    """What every ClusterCIDR view carries, valid or not."""

    name: str
    uid: str
    generation: int
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    resource_version: str = ""

    @property
    def has_finalizer(self) -> bool:
        return FINALIZER in self.finalizers


@dataclass(frozen=True, kw_only=True)
class ClusterCIDR(ClusterCIDRMeta):
    """A valid ClusterCIDR object (whatever its lifecycle state)."""

    per_node_host_bits: int
    ipv4: ipaddress.IPv4Network | None
    ipv6: ipaddress.IPv6Network | None
    selector: NodeSelector | None

    @property
    def frozen(self) -> bool:
        """The spec was edited under an older CRD."""
        return self.generation > 1

    def pool(self) -> Pool:
        families = tuple(
            PoolFamily(n, n.max_prefixlen - self.per_node_host_bits)
            for n in (self.ipv4, self.ipv6)
            if n is not None
        )
        return Pool(self.name, families, self.selector)


@dataclass(frozen=True, kw_only=True)
class InvalidClusterCIDR(ClusterCIDRMeta):
    """A ClusterCIDR that is never used and owns nothing."""

    reason: str


@dataclass(frozen=True)
class NodeView:
    """What the allocator needs of a Node."""

    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    pod_cidrs: tuple[IPNetwork, ...] = ()
    invalid_pod_cidrs: tuple[str, ...] = ()  # entries that do not parse
    deleting: bool = False
    creation_timestamp: str = ""
    pod_cidrs_managers: tuple[str, ...] = ()  # field managers owning spec.podCIDRs

    @property
    def has_cidrs(self) -> bool:
        """Non-empty podCIDRs, parsable or not: never patched (Kubernetes lets them change
        only from empty to a value)."""
        return bool(self.pod_cidrs or self.invalid_pod_cidrs)

    @property
    def labels_key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.labels.items()))


# ---------------------------------------------------------------- ClusterCIDR


def project_cluster_cidr(obj: Mapping[str, Any]) -> ClusterCIDR | InvalidClusterCIDR:
    """A ClusterCIDR dict as a view; an unusable one as `InvalidClusterCIDR` with the cause."""
    meta = _mapping(obj.get("metadata"))
    common: dict[str, Any] = {
        "name": str(meta.get("name", "")),
        "uid": str(meta.get("uid", "")),
        "generation": _int(meta.get("generation"), 1),
        "deleting": bool(meta.get("deletionTimestamp")),
        "finalizers": tuple(str(f) for f in meta.get("finalizers") or ()),
        "resource_version": str(meta.get("resourceVersion", "")),
    }
    try:
        return ClusterCIDR(**common, **_spec(obj.get("spec")))
    except (ValueError, SelectorError) as err:
        return InvalidClusterCIDR(**common, reason=str(err))


def _spec(spec: object) -> dict[str, Any]:
    if not isinstance(spec, Mapping):
        raise ValueError("spec is missing")
    bits = spec.get("perNodeHostBits")
    if not isinstance(bits, int) or isinstance(bits, bool):
        raise ValueError("spec.perNodeHostBits is required and must be an integer")
    ipv4 = _pool_cidr(spec.get("ipv4"), 4)
    ipv6 = _pool_cidr(spec.get("ipv6"), 6)
    if ipv4 is None and ipv6 is None:
        raise ValueError("A CIDR must be specified for ipv4 or ipv6.")
    for network in (ipv4, ipv6):
        if network is not None:
            check_family(network, network.max_prefixlen - bits)
    return {
        "per_node_host_bits": bits,
        "ipv4": ipv4,
        "ipv6": ipv6,
        "selector": parse_node_selector(spec.get("nodeSelector")),
    }


def check_family(network: IPNetwork, block_prefix: int) -> None:
    """Raise ValueError when the family has zero blocks or IPv6 holds more than 2^16."""
    name, host_bits = f"ipv{network.version}", network.max_prefixlen - block_prefix
    if block_prefix > network.max_prefixlen:
        raise ValueError(f"perNodeHostBits must be at least 0, got {host_bits}.")
    if block_prefix < network.prefixlen:
        raise ValueError(
            f"perNodeHostBits must not exceed the host bits of {name}: {host_bits} > "
            f"{network.max_prefixlen - network.prefixlen} for {network}."
        )
    if (
        network.version == 6
        and block_prefix >= IPV4_MAPPED.prefixlen
        and network.overlaps(IPV4_MAPPED)
    ):
        # The API server refuses a podCIDR whose address is IPv4-mapped, so every write of a
        # block inside ::ffff:0:0/96 would fail (the CRD refuses such a pool; an object stored
        # under an older CRD may hold one). A larger block's address is never mapped.
        raise ValueError(
            f"ipv6 {network} holds IPv4-mapped addresses (::ffff:0:0/96), which the API server "
            f"refuses as podCIDRs of /{block_prefix}."
        )
    if network.version == 6 and 1 << (block_prefix - network.prefixlen) > IPV6_MAX_BLOCKS:
        raise ValueError(
            "ipv6 may hold at most 65536 per-node blocks: (128 - perNodeHostBits) - prefix "
            f"length must be at most 16; {network} with {host_bits} host bits exceeds it."
        )


def _pool_cidr(raw: object, version: int) -> Any:
    if raw is None or raw == "":
        return None
    message = f"IPv{version} must be a valid IPv{version} CIDR."
    if not isinstance(raw, str):
        raise ValueError(message)
    network = parse_sloppy_cidr(raw)
    if network is None or network.version != version:
        raise ValueError(f"{message} Got {raw!r}.")
    return network


@functools.lru_cache(maxsize=1024)
def parse_sloppy_cidr(text: str) -> IPNetwork | None:
    """`address/prefix`, host bits allowed and cleared, as Kubernetes' ParseCIDRSloppy reads
    a Node's podCIDRs: leading zeros in an IPv4 part or a prefix are decimal (`010.0.1.0/24`
    is 10.0.1.0/24; the API server keeps such values where they were stored before strict
    validation, and a CIDR held that way must be reserved like any). None if invalid.
    Cached: an allocated Node's CIDR is read again from the PATCH answer and its watch echo
    (networks are immutable, so the parses can be shared)."""
    if not _CIDR_TEXT.fullmatch(text):
        return None
    address, prefix = text.split("/")
    # The family from the text: ip_network would try IPv4 first and fail (an exception) on
    # every IPv6 CIDR; only IPv6 text has a ':'.
    family = ipaddress.IPv6Network if ":" in address else ipaddress.IPv4Network
    if family is ipaddress.IPv4Network:
        address = _LEADING_ZEROS.sub("", address)
    text = f"{address}/{prefix.lstrip('0') or '0'}"
    try:
        return family(text, strict=False)
    except ValueError:
        return None


# ---------------------------------------------------------------- default pool


def default_pool(cidrs: Sequence[IPNetwork], mask_v4: int, mask_v6: int) -> Pool:
    """The `--cluster-cidr` pool: per-family block sizes, no selector, ranks last."""
    masks = {4: mask_v4, 6: mask_v6}
    families = []
    for network in sorted(cidrs, key=lambda n: n.version):
        check_family(network, masks[network.version])
        families.append(PoolFamily(network, masks[network.version]))
    if not families:
        raise ValueError("--cluster-cidr is empty")
    return Pool(DEFAULT_POOL_NAME, tuple(families), None, is_default=True)


# ---------------------------------------------------------------- Node


def project_node(obj: Mapping[str, Any]) -> NodeView:
    """A Node dict as a view. `spec.podCIDR` alone is read as a one-element list. Runs for
    every Node event and write answer: one pass over each field, no generator per field."""
    meta = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    raw = [str(c) for c in spec.get("podCIDRs") or () if c]
    if not raw and spec.get("podCIDR"):
        raw = [str(spec["podCIDR"])]
    cidrs: list[IPNetwork] = []
    invalid: list[str] = []
    for text in raw:
        network = parse_sloppy_cidr(text)
        if network is None:
            invalid.append(text)
        else:
            cidrs.append(network)
    labels = _mapping(meta.get("labels"))
    return NodeView(
        str(meta.get("name", "")),
        str(meta.get("uid", "")),
        {str(k): str(v) for k, v in labels.items()},
        tuple(cidrs),
        tuple(invalid),
        bool(meta.get("deletionTimestamp")),
        str(meta.get("creationTimestamp", "")),
        pod_cidrs_managers(meta.get("managedFields")),
    )


def pod_cidrs_managers(managed_fields: object) -> tuple[str, ...]:
    """Field managers whose managedFields entry owns `spec.podCIDRs` or `spec.podCIDR`."""
    if not isinstance(managed_fields, list):
        return ()
    managers: set[str] = set()
    for entry in managed_fields:
        fields = _mapping(entry)
        spec = _mapping(_mapping(fields.get("fieldsV1")).get("f:spec"))
        if "f:podCIDRs" in spec or "f:podCIDR" in spec:
            managers.add(str(fields.get("manager", "")))
    return tuple(sorted(managers)) if managers else ()


def _mapping(value: object) -> Mapping[str, Any]:
    if type(value) is dict:  # decoded JSON: skips the ABC check, ~10 calls per Node projected
        return value
    return value if isinstance(value, Mapping) else {}


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default

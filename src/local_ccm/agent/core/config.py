"""The agent's detection and policy settings and the loop's timing, already parsed.

Pure, no I/O. Nothing here parses argv: the flag loader builds an :class:`AgentConfig` from
validated values, so every address and CIDR is an ``ipaddress`` object from here on.
"""

from __future__ import annotations

from dataclasses import field
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address
from typing import Literal

from local_ccm.records import dataclass

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

Family = Literal[4, 6]  # IP version, as ``ipaddress`` objects and the netlink adapter report it
FAMILIES: tuple[Family, ...] = (4, 6)
AddressType = Literal["InternalIP", "ExternalIP"]
INTERNAL: AddressType = "InternalIP"
EXTERNAL: AddressType = "ExternalIP"
ADDRESS_TYPES: tuple[AddressType, ...] = (INTERNAL, EXTERNAL)
# The four detectors, InternalIP first: the order of detect mode's rows and of detection.
DETECTORS: tuple[tuple[AddressType, Family], ...] = tuple(
    (kind, family) for kind in ADDRESS_TYPES for family in FAMILIES
)
ProvidedPolicy = Literal["prefer", "strict", "ignore"]

# CNI, overlay and tunnel devices pick wrong addresses (squat/kilo#403,
# cilium/cilium#20000). Setting --interface-exclude replaces this list.
DEFAULT_INTERFACE_EXCLUDE: tuple[str, ...] = (
    "lo", "cilium_*", "lxc*", "cni*", "flannel*", "cali*", "vxlan*", "tunl*", "kube-ipvs*",
    "kube-bridge", "kube-dummy-if", "nodelocaldns", "docker*", "virbr*", "veth*", "weave",
    "ovn-k8s-*", "genev_sys_*", "antrea-*", "wg*", "kilo*", "tailscale*", "nebula*", "zt*",
)  # fmt: skip

# [compat] the original's only detector: ExternalIP via the route to 8.8.8.8.
DEFAULT_EXTERNAL_TARGETS: tuple[IPAddress, ...] = (ip_address("8.8.8.8"),)


def family_name(family: int) -> str:
    """``ipv4`` / ``ipv6``: the spelling of flags, metrics labels and detect output."""
    return f"ipv{family}"


@dataclass(frozen=True)
class TypeSettings:
    """Selection settings of one address type (InternalIP or ExternalIP)."""

    targets: tuple[IPAddress, ...] = ()  # at most one per family (validated by the loader)
    include: tuple[IPNetwork, ...] = ()  # positive CIDRs, in flag order
    exclude: tuple[IPNetwork, ...] = ()  # the `!` CIDRs
    interfaces: tuple[str, ...] = ()  # globs; empty = every interface

    def target(self, family: int) -> IPAddress | None:
        return next((t for t in self.targets if t.version == family), None)

    def positive_cidrs(self, family: int) -> tuple[IPNetwork, ...]:
        return tuple(n for n in self.include if n.version == family)

    def enabled(self, family: int) -> bool:
        """A detector exists when its type has a target or a positive CIDR of the family."""
        return self.target(family) is not None or bool(self.positive_cidrs(family))


@dataclass(frozen=True)
class AgentConfig:
    """Everything detection, the address function and the taint gates need."""

    internal: TypeSettings = field(default_factory=TypeSettings)
    external: TypeSettings = field(
        default_factory=lambda: TypeSettings(targets=DEFAULT_EXTERNAL_TARGETS)
    )
    interface_exclude: tuple[str, ...] = DEFAULT_INTERFACE_EXCLUDE
    include_vips: bool = False
    family_order: tuple[Family, ...] = ()  # empty: from the provided-node-ip annotation
    provided_node_ip_policy: ProvidedPolicy = "prefer"
    dedupe_external_ip: bool = True
    require_internal_ip: bool = False
    remove_taint: bool = True
    report_condition: bool = True

    def settings(self, kind: AddressType) -> TypeSettings:
        return self.internal if kind == INTERNAL else self.external

    def enabled(self, kind: AddressType, family: int) -> bool:
        return self.settings(kind).enabled(family)


@dataclass(frozen=True)
class LoopSettings:
    """The loop's timing and identity; durations in seconds."""

    node_name: str
    reconcile_interval: float = 10.0
    resync_interval: float = 1800.0
    settle_time: float = 5.0
    api_timeout: float = 15.0
    event_namespace: str = "default"
    provider_id: str = ""  # --provider-id template
    debounce_quiet: float = 0.25  # quiet time before a pass (see timing.debounce_wait)
    debounce_max: float = 1.0  # ... and at most 1 s after the first trigger of a burst

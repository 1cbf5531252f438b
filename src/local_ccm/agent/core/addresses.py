"""Which addresses a Node should carry, and the ownership annotation's encoding.

Pure, no I/O, no clock. Detection results come from ``agent.core.candidates``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from ipaddress import ip_address
from typing import Any, Literal

from local_ccm.agent.core.candidates import DISABLED, Detected, Detection, Disabled, Failed
from local_ccm.agent.core.config import (
    ADDRESS_TYPES,
    EXTERNAL,
    INTERNAL,
    AddressType,
    AgentConfig,
    Family,
    IPAddress,
    ProvidedPolicy,
    family_name,
)
from local_ccm.records import dataclass

FindingKind = Literal[
    "provided_mismatch", "dedupe_applied", "kept_last_good", "unparsable_provided",
    "malformed_owned",
]  # fmt: skip


# ------------------------------------------------------------------ Node entries and annotations
@dataclass(frozen=True, order=True)
class NodeAddress:
    """One ``status.addresses`` entry; ``address`` is kept verbatim (foreign entries may be
    hostnames or even unparsable)."""

    type: str
    address: str

    def to_api(self) -> dict[str, str]:
        return {"type": self.type, "address": self.address}

    @property
    def ip(self) -> IPAddress | None:
        """The parsed IP of an InternalIP/ExternalIP entry; None for other types or garbage."""
        return parsed_ip(self.address) if self.type in ADDRESS_TYPES else None

    @property
    def key(self) -> tuple[str, str]:
        """Identity for matching: IPs compare by value (``2001:DB8::1`` == ``2001:db8::1``)."""
        ip = self.ip
        return (self.type, self.address if ip is None else str(ip))


@functools.lru_cache(maxsize=64)
def parsed_ip(text: str) -> IPAddress | None:
    """An address as a Node shows it, parsed once: every pass reads the same few strings."""
    try:
        return ip_address(text)
    except ValueError:
        return None


def node_addresses(raw: Iterable[Mapping[str, Any]] | None) -> tuple[NodeAddress, ...]:
    """``status.addresses`` as read from the API."""
    return tuple(NodeAddress(str(a.get("type", "")), str(a.get("address", ""))) for a in raw or ())


@dataclass(frozen=True)
class Finding:
    """Something worth a condition message, an Event or a log line."""

    kind: FindingKind
    message: str
    type: AddressType | None = None
    family: Family | None = None
    address: str | None = None  # detected or kept address
    expected: str | None = None  # the provided IP of a mismatch


def encode_owned(entries: Iterable[NodeAddress]) -> str:
    """``InternalIP=192.0.2.10,ExternalIP=203.0.113.10``; empty string = owns nothing."""
    return ",".join(f"{e.type}={e.address}" for e in entries)


def parse_owned(value: str | None) -> tuple[tuple[NodeAddress, ...] | None, tuple[Finding, ...]]:
    """None when absent (never written); malformed -> owns nothing, plus a finding."""
    if value is None:
        return None, ()
    entries = []
    for item in filter(None, (i.strip() for i in value.split(","))):
        kind, _, raw = item.partition("=")
        entry = NodeAddress(kind, raw)
        ip = entry.ip
        if ip is None:
            message = f"ignoring malformed owned-addresses annotation {value!r}: item {item!r}"
            return (), (Finding("malformed_owned", message),)
        entries.append(NodeAddress(kind, str(ip)))
    return tuple(entries), ()


def parse_provided(value: str | None) -> tuple[tuple[IPAddress, ...], tuple[Finding, ...]]:
    """The kubelet's ``--node-ip`` (KEP-3705): 0-2 IPs, at most one per family."""
    items = [i.strip() for i in (value or "").split(",") if i.strip()]
    try:
        ips = tuple(ip_address(i) for i in items)
    except ValueError:
        ips = ()
    families = [ip.version for ip in ips]
    unspecified = any(ip.is_unspecified for ip in ips)
    if len(ips) == len(items) and len(set(families)) == len(families) <= 2 and not unspecified:
        return ips, ()
    message = f"ignoring unparsable provided-node-ip annotation {value!r}"
    return (), (Finding("unparsable_provided", message),)


# ------------------------------------------------------------------ desired addresses
@dataclass(frozen=True)
class AddressPolicy:
    family_order: tuple[Family, Family] = (4, 6)
    provided: ProvidedPolicy = "prefer"
    dedupe_external: bool = True


def resolve_family_order(
    configured: Sequence[Family], provided: Sequence[IPAddress]
) -> tuple[Family, Family]:
    """--ip-family-order; empty: the family of the annotation's first address (the kubelet's
    --node-ip decides the Node's primary family, one address or two), else IPv4."""
    first: Family
    if configured:
        first = configured[0]
    elif provided:
        first = 4 if provided[0].version == 4 else 6
    else:
        first = 4
    return (first, 6 if first == 4 else 4)


def address_policy(config: AgentConfig, provided: Sequence[IPAddress]) -> AddressPolicy:
    order = resolve_family_order(config.family_order, provided)
    return AddressPolicy(order, config.provided_node_ip_policy, config.dedupe_external_ip)


@dataclass(frozen=True)
class AddressPlan:
    addresses: tuple[NodeAddress, ...]  # the full list to write, in order
    owned: tuple[NodeAddress, ...]  # the managed entries, in output order
    findings: tuple[Finding, ...] = ()

    @property
    def annotation(self) -> str:
        return encode_owned(self.owned)


# Class ranks: within a type and family, kubelet-provided entries come first so that the Node's
# primary address (the first InternalIP per family, kubernetes/kubernetes#79391) stays the
# kubelet's --node-ip.
PROVIDED, MANAGED, FOREIGN = 0, 1, 2
_TYPE_RANK = {"InternalIP": 0, "ExternalIP": 1, "Hostname": 2, "InternalDNS": 3, "ExternalDNS": 4}


@dataclass(frozen=True)
class _Entry:
    addr: NodeAddress
    cls: int
    seq: int  # position in current; new managed entries come after all of them


def desired_addresses(
    current: Sequence[NodeAddress],
    provided: Sequence[IPAddress],
    detected: Detected,
    owned: Sequence[NodeAddress] | None,
    policy: AddressPolicy,
) -> AddressPlan:
    """The ordered list to write and what the agent owns in it. Missing keys = Disabled."""
    provided_ips = () if policy.provided == "ignore" else tuple(provided)
    entries = _classify(current, provided_ips, detected, owned)
    entries += _missing_provided(current, provided_ips)
    fixed = [e for e in entries if e.cls != MANAGED]
    findings: list[Finding] = []
    managed: list[_Entry] = []
    for kind in ADDRESS_TYPES:  # InternalIP first: dedupe compares with the final InternalIPs
        internal = {e.addr.ip for e in (*fixed, *managed) if e.addr.type == INTERNAL}
        rules = _Rules(entries, provided_ips, internal, policy, findings)
        for family in policy.family_order:
            detection = detected.get((kind, family), DISABLED)
            managed += rules.resolve(kind, family, detection, len(current) + len(managed))
    ordered = sorted((*fixed, *managed), key=lambda e: _order_key(e, policy.family_order))
    owned_out = tuple(e.addr for e in ordered if e.cls == MANAGED)
    return AddressPlan(tuple(e.addr for e in ordered), owned_out, tuple(findings))


def _classify(
    current: Sequence[NodeAddress],
    provided_ips: Sequence[IPAddress],
    detected: Detected,
    owned: Sequence[NodeAddress] | None,
) -> list[_Entry]:
    """Classify the current entries as provided, managed (owned or adopted) or foreign.

    Provided wins over owned, so a kubelet ``--node-ip`` is never ours to remove. Without an
    ownership annotation, IPs of an enabled detector are adopted: they are bootstrap data (the
    kubelet's seed, or the original's writes during a migration)."""
    owned_keys = None if owned is None else {o.key for o in owned}
    entries, seen = [], set()
    for seq, addr in enumerate(current):
        if addr.key in seen:  # a repeated (type, address) pair carries nothing: keep the first
            continue
        seen.add(addr.key)
        ip = addr.ip
        # The kubelet's --node-ip gives InternalIP entries: an ExternalIP with the same address
        # is an entry like any other (upstream's node address helpers keep both).
        if ip is not None and addr.type == INTERNAL and ip in provided_ips:
            cls = PROVIDED
        elif owned_keys is not None:
            cls = MANAGED if addr.key in owned_keys else FOREIGN
        elif ip is not None and _enabled(detected, addr.type, ip.version):
            cls = MANAGED  # adopted: bootstrap data of an enabled detector
        else:
            cls = FOREIGN
        entries.append(_Entry(addr, cls, seq))
    return entries


def _missing_provided(
    current: Sequence[NodeAddress], provided_ips: Sequence[IPAddress]
) -> list[_Entry]:
    """The kubelet's --node-ip addresses the Node does not show, where it shows another
    InternalIP of that family instead: put back as the kubelet's entries (never the agent's to
    remove). The Go original overwrote the kubelet's entry with its detection, and an
    InternalIP that differs from --node-ip is dropped under the default policy, which would
    leave a migrated Node without any InternalIP (the kubelet, with an external cloud
    provider, writes its addresses only while the list is empty). A Node that never showed an
    InternalIP of the family is left to the kubelet and to the warning about it."""
    shown = [a.ip for a in current if a.type == INTERNAL and a.ip is not None]
    return [_Entry(NodeAddress(INTERNAL, str(ip)), PROVIDED, len(current) + i)
            for i, ip in enumerate(provided_ips)
            if ip not in shown and any(o.version == ip.version for o in shown)]  # fmt: skip


@dataclass(frozen=True)
class _Rules:
    """The rules for one detector: write what was found unless an equal entry exists, drop the
    owned entries it replaces, keep the last good ones on a failure, defer to the kubelet's
    --node-ip, dedupe ExternalIPs and drop what is no longer configured."""

    entries: Sequence[_Entry]
    provided_ips: Sequence[IPAddress]
    internal_ips: set[IPAddress | None]
    policy: AddressPolicy
    findings: list[Finding]

    def resolve(self, kind: AddressType, family: Family, d: Detection, seq: int) -> list[_Entry]:
        mine = [
            e
            for e in self.entries
            if e.cls == MANAGED and e.addr.type == kind and _family(e.addr) == family
        ]
        if isinstance(d, Disabled):
            return []  # disabled: configuration no longer asks for them
        if isinstance(d, Failed):
            if mine:  # failed: last good kept, only while still on the Node
                kept = ", ".join(e.addr.address for e in mine)
                message = f"{kind} {family_name(family)}: {d.reason}; keeping {kept}"
                self.findings.append(Finding("kept_last_good", message, kind, family, kept))
            return mine
        if self._suppressed(kind, family, d.address):
            return []  # --node-ip wins, or ExternalIP dedupe; owned entries of this detector go
        if any(e.cls != MANAGED and e.addr.key == (kind, str(d.address)) for e in self.entries):
            return []  # satisfied by someone else's equal entry, not claimed
        same = [e for e in mine if e.addr.ip == d.address]
        return same[:1] or [_Entry(NodeAddress(kind, str(d.address)), MANAGED, seq)]

    def _suppressed(self, kind: AddressType, family: Family, a: IPAddress) -> bool:
        p = next((ip for ip in self.provided_ips if ip.version == family), None)
        if kind == INTERNAL and p is not None and p != a:
            message = (
                f"InternalIP {family_name(family)}: detected {a} but the kubelet's --node-ip is {p}"
            )
            self.findings.append(
                Finding("provided_mismatch", message, kind, family, str(a), str(p))
            )
            return True
        if kind == EXTERNAL and self.policy.dedupe_external and a in self.internal_ips:
            message = f"ExternalIP {family_name(family)}: {a} is also an InternalIP, not written"
            self.findings.append(Finding("dedupe_applied", message, kind, family, str(a)))
            return True
        # The kubelet's InternalIP entry satisfies an InternalIP detector that finds the same
        # address; an ExternalIP of that address is a different entry and is written.
        return kind == INTERNAL and a in self.provided_ips


def _enabled(detected: Detected, kind: str, family: int) -> bool:
    return any(k == (kind, family) and not isinstance(d, Disabled) for k, d in detected.items())


def _family(addr: NodeAddress) -> int | None:
    ip = addr.ip
    return None if ip is None else ip.version


def _order_key(e: _Entry, family_order: tuple[Family, Family]) -> tuple[int, int, int, int]:
    """(type rank, family rank, class rank), ties in current order."""
    if e.addr.type in ADDRESS_TYPES:
        ip = e.addr.ip
        family_rank = 2 if ip is None else family_order.index(ip.version)
    else:
        family_rank = 0
    return (_TYPE_RANK.get(e.addr.type, 5), family_rank, e.cls, e.seq)

"""`LoadBalancerIPPool` status: address counts per family and the `Ready` / `Conflict`
conditions.

Pure, no I/O: the other pools, the cluster's Service CIDRs and the Nodes' networks are
parameters. Counts are strings because a /64 holds more addresses than an int64.
"""

from __future__ import annotations

import bisect
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from local_ccm.lbipam.core.pools import AddressRange, InvalidPool, Pool, merge
from local_ccm.records import dataclass

Obj = dict[str, Any]
_END = 1 << 128  # above every address: bisects to the last range starting at or below one


@dataclass(frozen=True)
class NodeNetworks:
    """What of a Node a pool must not overlap: its addresses and its podCIDRs (texts)."""

    name: str
    addresses: tuple[str, ...] = ()
    pod_cidrs: tuple[str, ...] = ()


def text_range(text: str) -> AddressRange | None:
    """An address or CIDR text as a range; None when it does not parse (ignored)."""
    try:
        network = ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        return None
    return AddressRange(
        network.version, int(network.network_address), int(network.broadcast_address)
    )


@dataclass(frozen=True)
class InUse:
    """Addresses known to be used outside the pools, which a new allocation passes over: the
    cluster's Service CIDRs and every Node's addresses and podCIDRs, merged into sorted
    disjoint ranges. A Service that already holds one of them keeps it (the pool's `Conflict`
    names it); a requested one is the operator's explicit choice and is given."""

    ranges: tuple[AddressRange, ...] = ()

    @classmethod
    def of(cls, service_cidrs: Sequence[str], nodes: Sequence[NodeNetworks]) -> InUse:
        texts = [*service_cidrs, *(t for n in nodes for t in (*n.addresses, *n.pod_cidrs))]
        return cls(merge(r for r in map(text_range, texts) if r is not None))

    def around(self, version: int, value: int) -> AddressRange | None:
        """The in-use range holding the address, or None."""
        index = bisect.bisect_right(self.ranges, (version, value, _END)) - 1
        found = self.ranges[index] if index >= 0 else None
        if found is not None and found.version == version and found.first <= value <= found.last:
            return found
        return None


NO_ADDRESS_IN_USE = InUse()


def _overlaps(pool: Pool, texts: Sequence[str]) -> list[str]:
    found = []
    for text in texts:
        other = text_range(text)
        if other is not None and any(r.overlaps(other) for r in pool.ranges):
            found.append(text)
    return found


def conflicts(
    pool: Pool,
    others: Sequence[Pool],
    service_cidrs: Sequence[str],
    nodes: Sequence[NodeNetworks],
) -> list[str]:
    """Every overlap of the pool, each named: other pools, Service CIDRs, Node networks."""
    found = [
        f"overlaps pool {other.name}"
        for other in others
        if other.name != pool.name and any(a.overlaps(b) for a in pool.ranges for b in other.ranges)
    ]
    found += [f"overlaps the Service CIDR {text}" for text in _overlaps(pool, service_cidrs)]
    for node in nodes:
        found += [
            f"overlaps address {t} of Node {node.name}" for t in _overlaps(pool, node.addresses)
        ]
        found += [
            f"overlaps podCIDR {t} of Node {node.name}" for t in _overlaps(pool, node.pod_cidrs)
        ]
    return found


def counts(pool: Pool, used: Mapping[int, int]) -> Obj:
    """`{"ipv4": {"total", "used", "free"}, "ipv6": ...}` for the families the pool has."""
    result: Obj = {}
    for version in pool.families:
        total, taken = pool.capacity(version), used.get(version, 0)
        result[f"ipv{version}"] = {
            "total": str(total),
            "used": str(taken),
            "free": str(max(total - taken, 0)),
        }
    return result


def condition(kind: str, status: str, reason: str, message: str) -> Obj:
    """A condition without its transition time (the writer keeps the old one when unchanged)."""
    return {"type": kind, "status": status, "reason": reason, "message": message}


def desired_status(
    pool: Pool | InvalidPool, used: Mapping[int, int], found_conflicts: Sequence[str]
) -> Obj:
    """The whole status of one pool. A conflict does not stop allocation (the overlap may be
    intended, e.g. a pool carved from a Node subnet), so `Ready` stays True with a conflict."""
    if isinstance(pool, InvalidPool):
        return {
            "conditions": [
                condition("Ready", "False", "Invalid", "; ".join(pool.problems)),
                condition("Conflict", "Unknown", "Invalid", "not checked: the pool is invalid"),
            ]
        }
    ready = (
        condition("Ready", "False", "Disabled", "spec.disabled is true")
        if pool.disabled
        else condition("Ready", "True", "Ready", "used for new allocations")
    )
    conflict = (
        condition("Conflict", "True", "Overlap", "; ".join(found_conflicts))
        if found_conflicts
        else condition("Conflict", "False", "NoOverlap", "no overlap found")
    )
    return {**counts(pool, used), "conditions": [ready, conflict]}


def status_update(current: Mapping[str, Any] | None, desired: Obj, now: str) -> Obj | None:
    """The status to write (conditions with transition times, kept when a condition's status
    did not change), or None when `current` already says the same."""
    old = {c.get("type"): c for c in (current or {}).get("conditions") or ()}
    conditions = []
    for item in desired.get("conditions") or ():
        before = old.get(item["type"])
        same = before is not None and before.get("status") == item["status"]
        stamp = before.get("lastTransitionTime", now) if same and before else now
        conditions.append({**item, "lastTransitionTime": stamp})
    wanted = {**desired, "conditions": conditions}
    if dict(current or {}) == wanted:
        return None
    # Written as a merge patch: a key the status no longer has (the counts of a family the
    # pool lost, or of a pool now invalid) must be written as null, or it stays for ever.
    return {**wanted, **{key: None for key in current or {} if key not in wanted}}

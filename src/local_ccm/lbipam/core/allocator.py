"""The LoadBalancer address decision: which addresses a Service holds, or why it holds none.

Pure, no I/O. `decide` reads the ledger and never changes it; the caller records an
`Allocation` with `Ledger.hold` once the Service status is written, and `release`s a Service
that is deleted or no longer ours. Decisions depend only on the pools and the ledger, so a
restarted controller (ledger rebuilt by `build_ledger`) decides as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from local_ccm.lbipam.core.ledger import Holder, Ledger, clash
from local_ccm.lbipam.core.pools import IPAddress, Pool, ordered
from local_ccm.lbipam.core.service import ServiceRequest, wanted_families
from local_ccm.records import dataclass

REASONS = (
    "NoPool",
    "PoolExhausted",
    "AddressNotInPool",
    "AddressInUse",
    "SharingPortClash",
    "FamilyUnavailable",
    "ConflictingRequests",
)


class Placement(NamedTuple):
    """One address of an allocation, the pool it came from and how it is held."""

    address: IPAddress
    pool: str
    holder: Holder


@dataclass(frozen=True)
class Allocation:
    """The addresses to hold, in the Service's family order."""

    placements: tuple[Placement, ...]

    @property
    def addresses(self) -> tuple[IPAddress, ...]:
        return tuple(p.address for p in self.placements)


@dataclass(frozen=True)
class Problem:
    """Why a Service gets no address: `reason` (one of `REASONS`) and a message for the
    Event and the Service condition."""

    reason: str
    message: str


Decision = Allocation | Problem


def _holder(request: ServiceRequest, pool: Pool | None) -> Holder:
    if request.sharing_key:
        group: str | None = f"key:{request.sharing_key}"
    elif pool is not None and pool.allow_share:
        group = f"pool:{pool.name}"
    else:
        group = None
    return Holder(request.key, group, request.ports)


def _pool_of(address: IPAddress, pools: Sequence[Pool]) -> Pool | None:
    return next((p for p in pools if p.contains(address)), None)


def decide(
    request: ServiceRequest,
    pools: Sequence[Pool],
    ledger: Ledger,
    namespace_labels: Mapping[str, str],
) -> Decision:
    """The addresses `request` should hold: its current valid ones kept (no churn), the
    requested ones checked, or new ones from the selecting pools in order."""
    if request.problems:
        return Problem("ConflictingRequests", "; ".join(request.problems))
    selecting = [
        p for p in ordered(pools) if p.selects(request.labels, request.namespace, namespace_labels)
    ]
    if not selecting:
        return Problem("NoPool", f"no enabled pool selects {request.key}")
    if request.requested:
        return _place_requested(request, selecting, ledger)
    return _place_families(request, selecting, ledger)


def _place_families(request: ServiceRequest, selecting: Sequence[Pool], ledger: Ledger) -> Decision:
    families = wanted_families(request, sorted({v for p in selecting for v in p.families}))
    if isinstance(families, str):
        return Problem("FamilyUnavailable", families)
    placements = [_place(request, v, selecting, ledger) for v in families]
    found = tuple(p for p in placements if p is not None)
    partial_ok = request.family_policy == "PreferDualStack" and found
    if len(found) < len(families) and not partial_ok:
        missing = [f"IPv{v}" for v, p in zip(families, placements, strict=True) if p is None]
        names = ", ".join(p.name for p in selecting)
        return Problem("PoolExhausted", f"no free {' or '.join(missing)} address in {names}")
    return Allocation(found)


def _place_requested(
    request: ServiceRequest, selecting: Sequence[Pool], ledger: Ledger
) -> Decision:
    placements = []
    for address in request.requested:
        pool = _pool_of(address, selecting)
        if pool is None:
            return Problem("AddressNotInPool", f"{address} is in no pool that selects the Service")
        holder = _holder(request, pool)
        reason = clash(holder, ledger.holders(address))
        if reason is not None:
            return Problem(reason, _clash_message(reason, address, ledger))
        placements.append(Placement(address, pool.name, holder))
    return Allocation(tuple(placements))


def _clash_message(reason: str, address: IPAddress, ledger: Ledger) -> str:
    users = ", ".join(sorted(h.service for h in ledger.holders(address)))
    if reason == "SharingPortClash":
        return f"{address} is shared by {users} on a protocol and port this Service uses"
    return f"{address} is held by {users} without a common sharing key"


def _place(
    request: ServiceRequest, version: int, selecting: Sequence[Pool], ledger: Ledger
) -> Placement | None:
    return (
        _keep_current(request, version, selecting, ledger)
        or _join_group(request, version, selecting, ledger)
        or _first_free(request, version, selecting, ledger)
    )


def _keep_current(
    request: ServiceRequest, version: int, selecting: Sequence[Pool], ledger: Ledger
) -> Placement | None:
    for address in request.current:
        pool = _pool_of(address, selecting) if address.version == version else None
        if pool is not None:
            holder = _holder(request, pool)
            if clash(holder, ledger.holders(address)) is None:
                return Placement(address, pool.name, holder)
    return None


def _join_group(
    request: ServiceRequest, version: int, selecting: Sequence[Pool], ledger: Ledger
) -> Placement | None:
    """An address already used by the Service's sharing key, in any selecting pool: as with
    MetalLB's sharing key, Services of one key land on one address while their ports allow."""
    if not request.sharing_key:
        return None
    for pool in selecting:
        found = _join_in_pool(request, version, pool, ledger)
        if found is not None:
            return found
    return None


def _join_in_pool(
    request: ServiceRequest, version: int, pool: Pool, ledger: Ledger
) -> Placement | None:
    holder = _holder(request, pool)
    if holder.group is None:
        return None
    for address in ledger.group_addresses(holder.group, version):
        if pool.contains(address) and clash(holder, ledger.holders(address)) is None:
            return Placement(address, pool.name, holder)
    return None


def _first_free(
    request: ServiceRequest, version: int, selecting: Sequence[Pool], ledger: Ledger
) -> Placement | None:
    """Pools in order; in a pool that shares without a key (kube-vip's allow-share) an address
    its Services already use comes first, as kube-vip packs them; then the first free one."""
    for pool in selecting:
        if pool.allow_share and not request.sharing_key:
            joined = _join_in_pool(request, version, pool, ledger)
            if joined is not None:
                return joined
        spans = [r for r in pool.ranges if r.version == version]
        for span in reversed(spans) if pool.descending else spans:
            address = ledger.first_free(span, descending=pool.descending)
            if address is not None:
                return Placement(address, pool.name, _holder(request, pool))
    return None


def hold(ledger: Ledger, allocation: Allocation) -> None:
    """Record an allocation (once its Service status is written)."""
    ledger.hold([(p.address, p.holder) for p in allocation.placements])


def release(ledger: Ledger, service: str) -> tuple[IPAddress, ...]:
    """Forget a Service's addresses; returns them."""
    return ledger.release(service)


def build_ledger(
    requests: Sequence[ServiceRequest], pools: Sequence[Pool]
) -> tuple[Ledger, list[str]]:
    """The ledger from the Services' status at start, plus a note for each address that two
    Services claim without being allowed to share: the first in `requests` order keeps it
    (callers pass Services oldest first), the other is re-decided like any Service."""
    ledger, notes = Ledger(), []
    all_pools = ordered(pools)
    for request in requests:
        kept = []
        for address in request.current:
            holder = _holder(request, _pool_of(address, all_pools))
            if clash(holder, ledger.holders(address)) is None:
                kept.append((address, holder))
            else:
                notes.append(f"{request.key}: {_clash_message('', address, ledger)}")
        if kept:
            ledger.hold(kept)
    return ledger, notes


def usage(pool: Pool, ledger: Ledger) -> dict[int, int]:
    """Held addresses of the pool per family, for its status (shared addresses count once)."""
    used: dict[int, int] = {}
    for span in pool.ranges:
        used[span.version] = used.get(span.version, 0) + ledger.used_in(span)
    return used

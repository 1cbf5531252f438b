"""The LoadBalancer address decision: which addresses a Service holds, or why it holds none.

Pure, no I/O. `decide` reads the ledger and never changes it; the caller records an
`Allocation` with `Ledger.hold` once the Service status is written, and `release`s a Service
that is deleted or no longer ours. Decisions depend only on the pools and the ledger, so a
restarted controller (ledger rebuilt by `build_ledger`) decides as an uninterrupted one.

A Service keeps what it holds whatever happens to the pools: a pool that is disabled, deleted,
re-ranged or no longer selects the Service gives nothing new, but takes nothing back. Only the
Service moves itself: deleted, no longer ours, its status cleared, or a request for other
addresses. An address in no pool's ranges is kept and flagged (`OUTSIDE_POOLS`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

from local_ccm.lbipam.core.ledger import Holder, Ledger, clash
from local_ccm.lbipam.core.pools import AddressRange, IPAddress, Pool, ordered
from local_ccm.lbipam.core.service import ServiceRequest, wanted_families
from local_ccm.lbipam.core.status import NO_ADDRESS_IN_USE, InUse
from local_ccm.lbpools import home_pool, pool_of, selecting_pools
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
OUTSIDE_POOLS = "AddressOutsidePools"
"""The reason of an allocation that keeps an address no pool's ranges contain."""


class Placement(NamedTuple):
    """One address of an allocation, the pool it is in ("": none) and how it is held."""

    address: IPAddress
    pool: str
    holder: Holder


@dataclass(frozen=True)
class Allocation:
    """The addresses to hold, in the Service's family order; `notes` say why a held address
    is kept from outside the pools that select the Service; `wanting` why a PreferDualStack
    Service lacks a family it lists (its pools have no free address of it): such a Service
    waits for a release as one refused does."""

    placements: tuple[Placement, ...]
    notes: tuple[str, ...] = ()
    wanting: tuple[str, ...] = ()

    @property
    def addresses(self) -> tuple[IPAddress, ...]:
        return tuple(p.address for p in self.placements)

    @property
    def outside(self) -> tuple[IPAddress, ...]:
        """Held addresses kept although no pool's ranges contain them."""
        return tuple(p.address for p in self.placements if not p.pool)


@dataclass(frozen=True)
class Problem:
    """Why a Service gets no address: `reason` (one of `REASONS`) and a message for the
    Event and the Service condition."""

    reason: str
    message: str


Decision = Allocation | Problem


def _holder(request: ServiceRequest, pool: Pool | None, version: int) -> Holder:
    if request.sharing_key:
        return Holder(request.key, f"key:{request.sharing_key}", request.ports)
    if pool is not None and pool.shares(request.namespace, version):
        # kube-vip's allow-share compares port numbers only, whatever the protocol
        numbers = frozenset(("", number) for _, number in request.ports)
        return Holder(request.key, f"pool:{pool.name}", numbers)
    return Holder(request.key, None, request.ports)


def decide(
    request: ServiceRequest,
    pools: Sequence[Pool],
    ledger: Ledger,
    namespace_labels: Mapping[str, str],
    in_use: InUse = NO_ADDRESS_IN_USE,
) -> Decision:
    """The addresses `request` should hold: the ones it holds kept (no churn, whatever the
    pools became), the requested ones checked, or new ones from the selecting pools in order,
    passing over the addresses `in_use` outside the pools."""
    if request.problems:
        return Problem("ConflictingRequests", "; ".join(request.problems))
    every = ordered(pools)
    selecting = _selecting(request, every, namespace_labels)
    held = _held(request, selecting, every, ledger)
    if request.requested:
        decision = _place_requested(request, selecting, held, ledger)
    elif not selecting and not held:
        return Problem("NoPool", _no_pool(request))
    else:
        decision = _place_families(request, selecting, held, ledger, in_use)
    return _noted(decision, selecting, every, _left(request, held, ledger))


def _left(
    request: ServiceRequest, held: Mapping[IPAddress, Placement], ledger: Ledger
) -> tuple[str, ...]:
    """Why the Service loses an address it shows that it may no longer share (its ports or
    its sharing key changed): MetalLB says so too (`ClearAssignment`), and without it the
    operator sees only a new address."""
    found = []
    for address in request.current:
        others = [h for h in ledger.holders(address) if h.service != request.key]
        if address not in held and others:
            users = ", ".join(sorted(h.service for h in others))
            found.append(f"{address} left: this Service's ports or sharing key no longer let it"
                         f" share the address with {users}")  # fmt: skip
    return tuple(found)


def _selecting(
    request: ServiceRequest, every: Sequence[Pool], namespace_labels: Mapping[str, str]
) -> list[Pool]:
    return selecting_pools(every, request.labels, request.namespace, namespace_labels,
                           request.pool)  # fmt: skip


def _held(
    request: ServiceRequest, selecting: Sequence[Pool], every: Sequence[Pool], ledger: Ledger
) -> dict[IPAddress, Placement]:
    """The Service's current addresses it may keep: all but those another holder may not share
    (a claim lost at start, clashing ports). Each is placed in a selecting pool, else any pool,
    else none; outside every pool it is held as the ledger has it (a kube-vip allow-share pool
    that is gone still lets its Services share what they hold), and so is one shared through
    such a pool that the Service could no longer share as it is now (`_keeps_pool_sharing`)."""
    held = {}
    for address in request.current:
        pool = home_pool(address, selecting, every)
        holder = _holder(request, pool, address.version)
        others = ledger.holders(address)
        before = next((h for h in others if h.service == request.key), None)
        if before is not None and (
            (pool is None and holder.group is None) or _keeps_pool_sharing(before, holder, others)
        ):
            holder = before
        if clash(holder, ledger.holders(address)) is None:
            held[address] = Placement(address, pool.name if pool else "", holder)
    return held


def _keeps_pool_sharing(before: Holder, holder: Holder, others: Sequence[Holder]) -> bool:
    """A Service sharing an address through a kube-vip allow-share pool keeps sharing it when
    the holder it would be now clashes where the ledger's does not: one of the sharers given
    its sharing key first, or a pool that does not share added over their range, must not
    move it (nothing held is taken back). A sharing key that changes is the Service's own
    choice and is never kept over (MetalLB's rule)."""
    if before.group is None or not before.group.startswith("pool:"):
        return False
    return clash(holder, others) is not None and clash(before, others) is None


def _no_pool(request: ServiceRequest) -> str:
    if request.pool is not None:
        return (f"pool {request.pool}, which {request.key} names, does not exist, is disabled "
                "or does not select it")  # fmt: skip
    return f"no enabled pool selects {request.key}"


def _noted(
    decision: Decision, selecting: Sequence[Pool], every: Sequence[Pool], left: tuple[str, ...]
) -> Decision:
    if not isinstance(decision, Allocation):
        return decision
    names, by_name = {p.name for p in selecting}, {p.name: p for p in every}
    notes = tuple(_kept_note(p, by_name.get(p.pool)) for p in decision.placements
                  if p.pool not in names)  # fmt: skip
    return Allocation(decision.placements, notes + left, decision.wanting)


def _kept_note(placement: Placement, pool: Pool | None) -> str:
    if pool is None:
        return (f"{placement.address} is in no pool's ranges: kept until the Service releases"
                " it or asks for another address")  # fmt: skip
    why = "is disabled" if pool.disabled else "does not select the Service"
    return f"{placement.address} is kept from pool {pool.name}, which {why}"


def _place_families(
    request: ServiceRequest,
    selecting: Sequence[Pool],
    held: Mapping[IPAddress, Placement],
    ledger: Ledger,
    in_use: InUse,
) -> Decision:
    servable = {v for p in selecting for v in p.families} | {a.version for a in held}
    families = wanted_families(request, sorted(servable))
    if isinstance(families, str):
        return Problem("FamilyUnavailable", families)
    placements = [_place(request, v, selecting, held, ledger, in_use=in_use) for v in families]
    found = tuple(p for p in placements if p is not None)
    if len(found) == len(families):
        return Allocation(found)
    missing = [f"IPv{v}" for v, p in zip(families, placements, strict=True) if p is None]
    names = ", ".join(p.name for p in selecting)
    message = f"no free {' or '.join(missing)} address in {names}"
    if request.family_policy == "PreferDualStack" and found:
        return Allocation(found, wanting=(f"{message}: PreferDualStack, given when one is free",))
    return Problem("PoolExhausted", message)


def _place_requested(
    request: ServiceRequest,
    selecting: Sequence[Pool],
    held: Mapping[IPAddress, Placement],
    ledger: Ledger,
) -> Decision:
    """Requested addresses the Service holds are kept as they are; the others must be in a
    selecting pool and free to join."""
    placements = []
    for address in request.requested:
        if address in held:
            placements.append(held[address])
            continue
        if not selecting:
            return Problem("NoPool", _no_pool(request))
        pool = pool_of(address, selecting)
        if pool is None:
            return Problem("AddressNotInPool", f"{address} is in no pool that selects the Service")
        holder = _holder(request, pool, address.version)
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
    request: ServiceRequest,
    version: int,
    selecting: Sequence[Pool],
    held: Mapping[IPAddress, Placement],
    ledger: Ledger,
    *,
    in_use: InUse,
) -> Placement | None:
    return (
        _keep_current(version, selecting, held)
        or _join_group(request, version, selecting, ledger)
        or _first_free(request, version, selecting, ledger, in_use)
    )


def _keep_current(
    version: int, selecting: Sequence[Pool], held: Mapping[IPAddress, Placement]
) -> Placement | None:
    """A held address of the family, one in a selecting pool first."""
    mine = [p for p in held.values() if p.address.version == version]
    names = {p.name for p in selecting}
    return next((p for p in mine if p.pool in names), mine[0] if mine else None)


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
    holder = _holder(request, pool, version)
    if holder.group is None:
        return None
    for address in ledger.group_addresses(holder.group, version):
        if pool.contains(address) and clash(holder, ledger.holders(address)) is None:
            return Placement(address, pool.name, holder)
    return None


def _first_free(
    request: ServiceRequest,
    version: int,
    selecting: Sequence[Pool],
    ledger: Ledger,
    in_use: InUse,
) -> Placement | None:
    """Pools in order; in a pool that shares without a key (kube-vip's allow-share) an address
    its Services already use comes first, as kube-vip packs them; then the first free one that
    is not in use outside the pools."""
    for pool in selecting:
        if pool.shares(request.namespace, version) and not request.sharing_key:
            joined = _join_in_pool(request, version, pool, ledger)
            if joined is not None:
                return joined
        spans = [r for r in pool.ranges if r.version == version]
        for span in reversed(spans) if pool.descending else spans:
            address = _free_not_in_use(ledger, span, pool, in_use)
            if address is not None:
                return Placement(address, pool.name, _holder(request, pool, version))
    return None


def _free_not_in_use(
    ledger: Ledger, span: AddressRange, pool: Pool, in_use: InUse
) -> IPAddress | None:
    """The ledger's first free address of `span` outside `in_use`: each step past an in-use
    address jumps its whole range, so the steps are at most the in-use ranges in `span`."""
    while span.first <= span.last:
        found = ledger.first_free(span, descending=pool.descending,
                                  avoid_buggy=pool.avoid_buggy_ips)  # fmt: skip
        blocked = None if found is None else in_use.around(span.version, int(found))
        if blocked is None:
            return found
        span = (AddressRange(span.version, span.first, blocked.first - 1) if pool.descending
                else AddressRange(span.version, blocked.last + 1, span.last))  # fmt: skip
    return None


def hold(ledger: Ledger, allocation: Allocation) -> None:
    """Record an allocation (once its Service status is written)."""
    ledger.hold([(p.address, p.holder) for p in allocation.placements])


def release(
    ledger: Ledger, service: str, shown: Collection[IPAddress] = ()
) -> tuple[IPAddress, ...]:
    """Forget a Service's addresses but those it still `shown`s; returns the ones forgotten.
    A Service that is no longer ours while still a LoadBalancer (`--lb-class` or
    `--lb-classless` changed) is never touched, so its status may go on showing an address:
    that one stays held until the Service shows another or is gone, or a Service of ours
    would be given it too."""
    kept = [(address, holder) for address, holder in ledger.entries(service) if address in shown]
    forgotten = ledger.release(service)
    if kept:
        ledger.hold(kept)
    return tuple(a for a in forgotten if a not in shown)


def build_ledger(
    requests: Sequence[ServiceRequest],
    pools: Sequence[Pool],
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[Ledger, list[str]]:
    """The ledger from the Services' status at start, plus a note for each address that two
    Services claim without being allowed to share: the first in `requests` order keeps it
    (callers pass Services oldest first), the other is re-decided like any Service. Each
    address's pool is chosen as a live decision chooses it (`home_pool`: one rule for both, so a
    restart cannot change who may share an address), with the namespaces'
    labels."""
    ledger, notes = Ledger(), []
    all_pools = ordered(pools)
    labels = namespace_labels or {}
    for request in requests:
        kept = []
        selecting = _selecting(request, all_pools, labels.get(request.namespace) or {})
        for address in request.current:
            holder = _holder(request, home_pool(address, selecting, all_pools), address.version)
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
        taken = ledger.used_in(span, avoid_buggy=pool.avoid_buggy_ips)
        used[span.version] = used.get(span.version, 0) + taken
    return used

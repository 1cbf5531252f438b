"""The node IPAM allocator's ledger and reservation set.

Pure, no I/O. One `ReservationSet` per family, shared by all pools, holds every reserved
range: the Service and `--reserved-cidrs` ranges, every Node CIDR (owned or not, pending or
committed) and released blocks in quarantine (`--cidr-reuse-delay`). The pools' `BlockSet`s
are kept in step with it: the blocks a new reservation intersects are marked at once, and when
one goes away each of its blocks is re-checked against the others before it is freed. The
ledger records, per Node uid, the CIDRs it holds and the pool owning each one when it was
allocated, so a release never depends on the Node's current labels (upstream re-evaluated
them, and a relabelled Node leaked its block until a restart). Each `PoolState` counts what its
pool owns as it changes, so a pool's status costs the same at 10 or 10,000 Nodes.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field, replace

from local_ccm.ipam.core.cidrset import BlockSet, Holder, IPNetwork, ReservationSet
from local_ccm.ipam.core.model import Pool
from local_ccm.records import dataclass

Owners = tuple[tuple[IPNetwork, str | None], ...]
RESERVED: Holder = ("reserved", "")


@dataclass(frozen=True)
class Entry:
    """Ledger record of one Node (by uid): its CIDRs and their owners."""

    name: str
    owners: Owners
    pending: bool  # reserved for a write whose outcome is not known yet

    @property
    def cidrs(self) -> tuple[IPNetwork, ...]:
        return tuple(cidr for cidr, _ in self.owners)


@dataclass(frozen=True)
class FamilyUsage:
    """One family of a pool's status."""

    network: IPNetwork
    block_prefix: int
    capacity: int
    allocated: int
    unavailable: int
    free: int


@dataclass(frozen=True)
class PoolUsage:
    nodes: int
    owned_cidrs: int
    families: tuple[FamilyUsage, ...]

    @property
    def exhausted_versions(self) -> tuple[int, ...]:
        return tuple(f.network.version for f in self.families if f.free == 0)


@dataclass
class PoolState:
    """A pool in the allocator: its block sets and the Node CIDRs it owns, counted."""

    pool: Pool
    ready: bool
    sets: dict[int, BlockSet]
    uid: str = ""
    owned: dict[str, tuple[IPNetwork, ...]] = field(default_factory=dict)  # Node uid -> CIDRs
    owned_cidrs: int = 0
    covered: dict[int, Counter[int]] = field(init=False)  # version -> block -> owned CIDRs on it

    def __post_init__(self) -> None:
        owned, self.owned, self.owned_cidrs = self.owned, {}, 0
        self.covered = {version: Counter() for version in self.sets}
        for uid, cidr in ((u, c) for u, cidrs in owned.items() for c in cidrs):
            self.own(uid, cidr)

    def own(self, uid: str, cidr: IPNetwork) -> None:
        self.owned[uid] = (*self.owned.get(uid, ()), cidr)
        self.owned_cidrs += 1
        self._cover(cidr, 1)

    def disown(self, uid: str) -> None:
        for cidr in self.owned.pop(uid, ()):
            self.owned_cidrs -= 1
            self._cover(cidr, -1)

    def _cover(self, cidr: IPNetwork, delta: int) -> None:
        blocks = self.sets.get(cidr.version)
        if blocks is None:
            return
        counts = self.covered[cidr.version]
        for index in blocks.index_range(cidr):
            counts[index] += delta
            if not counts[index]:
                del counts[index]

    def usage(self) -> PoolUsage:
        """Status numbers; overlapping owned CIDRs count once."""
        families = tuple(
            _family_usage(blocks, len(self.covered[version]))
            for version, blocks in self.sets.items()
        )
        return PoolUsage(len(self.owned), self.owned_cidrs, families)


def _family_usage(blocks: BlockSet, allocated: int) -> FamilyUsage:
    unavailable = max(0, blocks.used - allocated)
    return FamilyUsage(
        blocks.network, blocks.block_prefix, blocks.capacity, allocated, unavailable, blocks.free
    )


class Ledger:
    """Node CIDRs by uid, the reservations behind them, conflicts and the quarantine.

    `block_sets(version)` returns the `BlockSet`s of every pool family of that IP version;
    they are marked and cleared here whenever a reservation changes.
    """

    def __init__(
        self,
        block_sets: Callable[[int], Iterable[BlockSet]],
        *,
        reserved: Sequence[IPNetwork] = (),
        reuse_delay: float = 0.0,
    ) -> None:
        self._block_sets = block_sets
        self.reuse_delay = reuse_delay
        self._reservations = {4: ReservationSet(4), 6: ReservationSet(6)}
        self._entries: dict[str, Entry] = {}
        self._unowned = 0  # CIDRs of all entries that no pool owns, kept counted
        self._conflicts: set[frozenset[str]] = set()
        self._quarantine: list[tuple[float, int, str, IPNetwork]] = []  # heap by expiry
        for cidr in reserved:
            self._reserve(cidr, RESERVED)

    # ------------------------------------------------------------ entries

    def get(self, uid: str) -> Entry | None:
        return self._entries.get(uid)

    def hold(self, uid: str, name: str, owners: Owners, *, pending: bool) -> None:
        """Record a Node's CIDRs and reserve each one for it."""
        self._put(uid, Entry(name, owners, pending))
        for cidr, _ in owners:
            self._reserve(cidr, ("node", uid))

    def commit(self, uid: str) -> None:
        entry = self._entries.get(uid)
        if entry is not None:
            self._entries[uid] = replace(entry, pending=False)

    def disown(self, uid: str, pool_name: str) -> str:
        """The pool vanished: its CIDRs of this Node become unowned; the Node's name."""
        entry = self._entries[uid]
        owners = tuple((c, None if o == pool_name else o) for c, o in entry.owners)
        self._put(uid, replace(entry, owners=owners))
        return entry.name

    def drop(self, uid: str, *, quarantine: bool, now: float = 0.0) -> Entry | None:
        """Forget a Node and release its reservations, into quarantine when asked."""
        entry = self._put(uid, None)
        if entry is None:
            return None
        self._conflicts = {pair for pair in self._conflicts if uid not in pair}
        for cidr in entry.cidrs:
            if quarantine:
                # Held by the quarantine before the Node lets go, so it is never free between.
                self._reserve(cidr, ("quarantine", uid))
                heapq.heappush(self._quarantine, (now + self.reuse_delay, cidr.version, uid, cidr))
            self._unreserve(cidr, ("node", uid))
        return entry

    def conflicting(self, uid: str, cidrs: Iterable[IPNetwork]) -> tuple[str, ...]:
        """Names of other Nodes whose CIDRs overlap `cidrs`; the pairs are remembered."""
        others = set()
        for cidr in cidrs:
            reservations = self._reservations[cidr.version]
            for hit in reservations.intersecting(cidr):
                for kind, other in reservations.holders(hit):
                    if kind == "node" and other != uid:
                        others.add(other)
        for other in others:
            self._conflicts.add(frozenset((uid, other)))
        return tuple(sorted(self._entries[o].name for o in others if o in self._entries))

    def node_cidrs(self, uid: str) -> Mapping[IPNetwork, str | None]:
        entry = self._entries.get(uid)
        return dict(entry.owners) if entry else {}

    def unowned_count(self) -> int:
        return self._unowned

    def _put(self, uid: str, entry: Entry | None) -> Entry | None:
        """Set or (None) remove the entry of `uid`, keeping the unowned count; the old one."""
        old = self._entries.pop(uid, None) if entry is None else self._entries.get(uid)
        if entry is not None:
            self._entries[uid] = entry
            self._unowned += _unowned(entry)
        if old is not None:
            self._unowned -= _unowned(old)
        return old

    def conflict_count(self) -> int:
        return len(self._conflicts)

    # ------------------------------------------------------------ quarantine

    def expire(self, now: float) -> bool:
        """Free quarantined blocks whose delay has passed; True when any became free."""
        freed = False
        while self._quarantine and self._quarantine[0][0] <= now:
            _, _, uid, cidr = heapq.heappop(self._quarantine)
            freed |= self._unreserve(cidr, ("quarantine", uid))
        return freed

    def next_expiry(self) -> float | None:
        return self._quarantine[0][0] if self._quarantine else None

    # ------------------------------------------------------------ reservations

    def fill(self, blocks: BlockSet) -> BlockSet:
        """Mark the blocks of a new pool family that current reservations intersect."""
        for cidr in self._reservations[blocks.network.version].intersecting(blocks.network):
            blocks.occupy(blocks.index_range(cidr))
        return blocks

    def _reserve(self, cidr: IPNetwork, holder: Holder) -> None:
        if self._reservations[cidr.version].add(cidr, holder):
            for blocks in self._block_sets(cidr.version):
                blocks.occupy(blocks.index_range(cidr))

    def _unreserve(self, cidr: IPNetwork, holder: Holder) -> bool:
        reservations = self._reservations[cidr.version]
        if not reservations.remove(cidr, holder):
            return False
        for blocks in self._block_sets(cidr.version):
            release_unreserved(blocks, cidr, reservations)
        return True


def _unowned(entry: Entry) -> int:
    return sum(1 for _, owner in entry.owners if owner is None)


def release_unreserved(blocks: BlockSet, cidr: IPNetwork, reservations: ReservationSet) -> None:
    """Free the blocks `cidr` touched that no other reservation intersects."""
    span = blocks.index_range(cidr)
    if not span:
        return
    # The blocks of `span` cover exactly this region: the CIDR's part of the pool, or the one
    # block that contains it. Reservations elsewhere in that region may share its blocks.
    if cidr.prefixlen > blocks.block_prefix:
        region = blocks.block(span.start)
    else:
        region = cidr if cidr.prefixlen >= blocks.network.prefixlen else blocks.network
    remaining = reservations.intersecting(region)
    if any(other.prefixlen <= region.prefixlen for other in remaining):
        return  # something covers the whole region
    covered = sorted((r.start, r.stop) for r in (blocks.index_range(o) for o in remaining) if r)
    start = span.start
    for kept_start, kept_stop in covered:
        if kept_start > start:
            blocks.release(range(start, kept_start))
        start = max(start, kept_stop)
    if start < span.stop:
        blocks.release(range(start, span.stop))

"""Pool choice, allocation, recovery and release for the node IPAM controller.

Pure, no I/O. The `Allocator` is the controller's in-memory state (spec/ipam.md §5–§8): one
reservation set per family shared by all pools, one `BlockSet` per pool family kept in step
with it, and a ledger of every Node's CIDRs with the pool that owns each one. The loop feeds it
observed objects and API outcomes and writes what it returns; nothing here raises for odd data.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from local_ccm.ipam.cidrset import BlockSet, Holder, IPNetwork, ReservationSet
from local_ccm.ipam.model import ClusterCIDR, InvalidClusterCIDR, NodeView, Pool
from local_ccm.ipam.selector import Match

WaitReason = Literal["NoMatchingClusterCIDR", "Exhausted"]
ReadyReason = Literal["Ready", "Invalid", "Terminating", "SpecChanged", "FinalizerPending"]
FinalizerAction = Literal["add", "remove"]
Owners = tuple[tuple[IPNetwork, str | None], ...]
_CANDIDATE_CACHE_LIMIT = 4096


# ---------------------------------------------------------------- pool state and finalizers


def pool_readiness(cc: ClusterCIDR | InvalidClusterCIDR) -> tuple[ReadyReason, str]:
    """The `Ready` condition's reason and message (§1.4); only "Ready" allocates (§4.1)."""
    if isinstance(cc, InvalidClusterCIDR):
        return "Invalid", cc.reason
    if cc.deleting:
        return "Terminating", "the ClusterCIDR is being deleted"
    if cc.frozen:
        return "SpecChanged", "the spec was changed after creation; create a new ClusterCIDR"
    if not cc.has_finalizer:
        return "FinalizerPending", "waiting for the finalizer to be persisted"
    return "Ready", "used for new allocations"


def plan_finalizer(cc: ClusterCIDR | InvalidClusterCIDR, owned: int) -> FinalizerAction | None:
    """Add ours to a valid live pool; remove it once a terminating pool owns no CIDR (§1.6, §8).

    Invalid pools never get it, and lose ours on deletion (§2.3).
    """
    if cc.deleting:
        return "remove" if cc.has_finalizer and (owned == 0 or _invalid(cc)) else None
    if _invalid(cc) or cc.has_finalizer:
        return None
    return "add"


def _invalid(cc: ClusterCIDR | InvalidClusterCIDR) -> bool:
    return isinstance(cc, InvalidClusterCIDR)


# ---------------------------------------------------------------- ordering (§4.2)


def rank_key(pool: Pool, match: Match | None) -> tuple[int, int, int, int, str, str, str]:
    """Sort key: selector pools by P0-P5, then catch-alls by P1, P2, P4, P5, then the default."""
    group = 2 if pool.is_default else 1 if pool.selector is None else 0
    first = pool.families[0]  # IPv4 when present (families are v4 first)
    return (
        group,
        -(match.requirements if match else 0),  # P0, higher first
        pool.capacity,  # P1, lower first
        -first.block_prefix,  # P2, higher first
        match.canonical if match else "",  # P3; str order = UTF-8 byte order
        str(first.network),  # P4, compared as text
        pool.name,  # P5 [beyond]
    )


def order_pools(pools: Iterable[Pool], node: NodeView, *, legacy: bool = False) -> list[Pool]:
    """The pools whose selector matches `node`, best first."""
    ranked = []
    for pool in pools:
        match = None
        if pool.selector is not None:
            match = pool.selector.match(node.labels, node.name, legacy=legacy)
            if match is None:
                continue
        ranked.append((rank_key(pool, match), pool))
    ranked.sort(key=lambda item: item[0])
    return [pool for _, pool in ranked]


def allocation_order(nodes: Iterable[NodeView]) -> list[NodeView]:
    """Nodes that need CIDRs, by creationTimestamp then name (§6 rule 6, §5.6)."""
    waiting = [n for n in nodes if not n.has_cidrs and not n.deleting]
    return sorted(waiting, key=lambda n: (n.creation_timestamp, n.name))


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class Allocation:
    """CIDRs to write to a Node (IPv4 first), reserved before the write starts (§5.4)."""

    node: str
    uid: str
    pool: str
    cidrs: tuple[IPNetwork, ...]
    tries: int = 1  # pools tried, for the allocation_tries_per_request histogram


@dataclass(frozen=True)
class Waiting:
    """No pool could serve the Node now (§9): a value, not an exception."""

    node: str
    reason: WaitReason
    considered: tuple[str, ...] = ()
    exhausted: tuple[tuple[str, int], ...] = ()  # (pool, IP version without a free block)


@dataclass(frozen=True)
class Skipped:
    """The Node is never allocated: it has CIDRs (§5.5) or is terminating without (§5.6)."""

    node: str
    reason: Literal["HasCIDRs", "Terminating"]


@dataclass(frozen=True)
class Recorded:
    """A Node's existing CIDRs after they were reserved (§6 rule 3, §10)."""

    node: str
    uid: str
    owners: Owners = ()
    conflicts: tuple[str, ...] = ()  # other Nodes whose CIDRs overlap these (§6 rule 4)
    foreign: bool = False  # CIDRs we did not write (§10 rule 2)
    changed: bool = True  # False: nothing new (our own write, or seen before)

    @property
    def unowned(self) -> tuple[IPNetwork, ...]:
        return tuple(cidr for cidr, owner in self.owners if owner is None)


@dataclass(frozen=True)
class FamilyUsage:
    """One family of a pool's status (§1.4)."""

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


# ---------------------------------------------------------------- allocator state


@dataclass(frozen=True)
class _Entry:
    """Ledger record of one Node (by uid): its CIDRs and their owners (§5.1 rule 3, §10)."""

    name: str
    owners: Owners
    pending: bool  # reserved for a write whose outcome is not known yet


@dataclass
class _PoolState:
    pool: Pool
    ready: bool
    sets: dict[int, BlockSet]
    uid: str = ""
    owned: dict[str, tuple[IPNetwork, ...]] = field(default_factory=dict)  # Node uid -> CIDRs


_RESERVED: Holder = ("reserved", "")


class Allocator:
    """All allocation decisions, serialised in one place (§5.4 rule 1)."""

    def __init__(
        self,
        *,
        reserved: Sequence[IPNetwork] = (),
        legacy_and_terms: bool = False,
        reuse_delay: float = 0.0,
    ) -> None:
        self.legacy = legacy_and_terms
        self.reuse_delay = reuse_delay
        self._reservations = {4: ReservationSet(4), 6: ReservationSet(6)}
        self._pools: dict[str, _PoolState] = {}
        self._ledger: dict[str, _Entry] = {}
        self._conflicts: set[frozenset[str]] = set()
        self._quarantine: list[tuple[float, int, str, IPNetwork]] = []  # heap by expiry
        self._candidates: dict[tuple[object, ...], tuple[str, ...]] = {}
        for cidr in reserved:
            self._reserve(cidr, _RESERVED)

    # ------------------------------------------------------------ pools

    def set_pool(self, pool: Pool, *, ready: bool, uid: str = "") -> tuple[str, ...]:
        """Add or update a pool. A new uid under the same name is a new object: the old one's
        CIDRs become unowned first; returns the names of the Nodes concerned (§8)."""
        affected: tuple[str, ...] = ()
        state = self._pools.get(pool.name)
        if state is not None and state.uid != uid:
            affected, state = self.remove_pool(pool.name), None
        if state is not None and state.pool == pool:
            state.ready = ready
        else:
            owned = state.owned if state is not None else {}
            state = _PoolState(pool, ready, self._block_sets(pool), uid, owned)
            self._pools[pool.name] = state
        self._candidates.clear()
        return affected

    def remove_pool(self, name: str) -> tuple[str, ...]:
        """Drop a vanished pool at once; its CIDRs stay reserved as unowned (§8). Returns the
        names of the Nodes whose CIDRs it owned (Event `ClusterCIDRRemoved`)."""
        state = self._pools.pop(name, None)
        self._candidates.clear()
        if state is None:
            return ()
        for uid in state.owned:
            entry = self._ledger[uid]
            owners = tuple((c, None if o == name else o) for c, o in entry.owners)
            self._ledger[uid] = replace(entry, owners=owners)
        return tuple(sorted(self._ledger[uid].name for uid in state.owned))

    def pool(self, name: str) -> Pool | None:
        state = self._pools.get(name)
        return state.pool if state else None

    def _block_sets(self, pool: Pool) -> dict[int, BlockSet]:
        sets = {}
        for family in pool.families:
            blocks = BlockSet(family.network, family.block_prefix)
            for cidr in self._reservations[family.version].intersecting(family.network):
                blocks.occupy(blocks.index_range(cidr))
            sets[family.version] = blocks
        return sets

    # ------------------------------------------------------------ choosing

    def candidates(self, node: NodeView) -> tuple[str, ...]:
        """Names of the Ready pools matching `node`, in §4.2 order (cached per label set)."""
        key: tuple[object, ...] = (node.labels_key, node.name if self._uses_fields() else "")
        cached = self._candidates.get(key)
        if cached is None:
            ready = (s.pool for s in self._pools.values() if s.ready)
            cached = tuple(p.name for p in order_pools(ready, node, legacy=self.legacy))
            if len(self._candidates) >= _CANDIDATE_CACHE_LIMIT:
                self._candidates.clear()
            self._candidates[key] = cached
        return cached

    def _uses_fields(self) -> bool:
        return any(
            t.fields for s in self._pools.values() if s.pool.selector for t in s.pool.selector.terms
        )

    def allocate(self, node: NodeView) -> Allocation | Waiting | Skipped:
        """Reserve the lowest free block of every family of the first pool that has one in
        all of them (§4.4, §5.2, §5.3). Asking again for a pending Node returns the same."""
        if node.has_cidrs:
            return Skipped(node.name, "HasCIDRs")
        entry = self._ledger.get(node.uid)
        if entry is not None:
            owner = next((o for _, o in entry.owners if o), "")
            return Allocation(node.name, node.uid, owner, tuple(c for c, _ in entry.owners))
        if node.deleting:
            return Skipped(node.name, "Terminating")
        names = self.candidates(node)
        exhausted: list[tuple[str, int]] = []
        for tries, name in enumerate(names, start=1):
            picks = self._lowest_free(self._pools[name], exhausted)
            if picks is not None:
                self._hold(node, tuple((c, name) for c in picks), pending=True)
                return Allocation(node.name, node.uid, name, picks, tries)
        reason: WaitReason = "Exhausted" if names else "NoMatchingClusterCIDR"
        return Waiting(node.name, reason, names, tuple(exhausted))

    def _lowest_free(
        self, state: _PoolState, exhausted: list[tuple[str, int]]
    ) -> tuple[IPNetwork, ...] | None:
        picks = []
        for family in state.pool.families:
            blocks = state.sets[family.version]
            index = blocks.lowest_free()
            if index is None:
                exhausted.append((state.pool.name, family.version))
                return None  # all families or none: nothing reserved yet (§5.3)
            picks.append(blocks.block(index))
        return tuple(picks)

    # ------------------------------------------------------------ write outcomes

    def commit(self, uid: str) -> None:
        """The write landed: the pool owns the CIDRs for good (§5.4 rule 3, 2xx)."""
        entry = self._ledger.get(uid)
        if entry is not None:
            self._ledger[uid] = replace(entry, pending=False)

    def abort(self, uid: str) -> tuple[IPNetwork, ...]:
        """The write certainly did not land (404, other uid): release at once, no quarantine."""
        entry = self._ledger.get(uid)
        if entry is None or not entry.pending:
            return ()
        return self._drop(uid, quarantine=False)

    def is_pending(self, uid: str) -> bool:
        entry = self._ledger.get(uid)
        return entry is not None and entry.pending

    # ------------------------------------------------------------ existing CIDRs

    def recover(self, nodes: Iterable[NodeView]) -> list[Recorded]:
        """Start-up (§6 rule 3): reserve every CIDR of every Node, owned or not."""
        return [self.record(n, recovery=True) for n in nodes if n.pod_cidrs]

    def record(self, node: NodeView, *, recovery: bool = False) -> Recorded:
        """Reserve the CIDRs a Node holds. Ours (pending or committed) are confirmed; others
        are foreign (§10) unless seen at start-up; they replace a pending allocation of ours."""
        entry = self._ledger.get(node.uid)
        if not node.pod_cidrs:
            return Recorded(node.name, node.uid, changed=False)
        if entry is not None:
            if tuple(c for c, _ in entry.owners) == node.pod_cidrs:
                self.commit(node.uid)
                return Recorded(node.name, node.uid, entry.owners, changed=False)
            self._drop(node.uid, quarantine=False)  # theirs landed, so ours did not
        order = [self._pools[name].pool for name in self._order_all(node)]
        owners = tuple((cidr, self._owner(cidr, order)) for cidr in node.pod_cidrs)
        conflicts = self._conflicting(node.uid, node.pod_cidrs)
        self._hold(node, owners, pending=False)
        return Recorded(node.name, node.uid, owners, conflicts, foreign=not recovery)

    def _order_all(self, node: NodeView) -> list[str]:
        pools = (s.pool for s in self._pools.values())
        return [p.name for p in order_pools(pools, node, legacy=self.legacy)]

    def _owner(self, cidr: IPNetwork, order: Sequence[Pool]) -> str | None:
        """§6 rule 3: first candidate containing it, else first pool by name containing it."""
        by_name = sorted((s.pool for s in self._pools.values()), key=lambda p: p.name)
        for pool in [*order, *by_name]:
            family = pool.family(cidr.version)
            if family is not None and cidr.subnet_of(family.network):  # type: ignore[arg-type]
                return pool.name
        return None

    def _conflicting(self, uid: str, cidrs: Iterable[IPNetwork]) -> tuple[str, ...]:
        others = set()
        for cidr in cidrs:
            for hit in self._reservations[cidr.version].intersecting(cidr):
                for kind, other in self._reservations[cidr.version].holders(hit):
                    if kind == "node" and other != uid:
                        others.add(other)
        for other in others:
            self._conflicts.add(frozenset((uid, other)))
        return tuple(sorted(self._ledger[o].name for o in others if o in self._ledger))

    def _hold(self, node: NodeView, owners: Owners, *, pending: bool) -> None:
        self._ledger[node.uid] = _Entry(node.name, owners, pending)
        for cidr, owner in owners:
            self._reserve(cidr, ("node", node.uid))
            state = self._pools.get(owner) if owner else None
            if state is not None:
                state.owned[node.uid] = (*state.owned.get(node.uid, ()), cidr)

    # ------------------------------------------------------------ release (§7)

    def release(self, uid: str, now: float) -> tuple[IPNetwork, ...]:
        """The Node object is gone: free its CIDRs, after `reuse_delay` if set (§7)."""
        return self._drop(uid, quarantine=self.reuse_delay > 0, now=now)

    def _drop(self, uid: str, *, quarantine: bool, now: float = 0.0) -> tuple[IPNetwork, ...]:
        entry = self._ledger.pop(uid, None)
        if entry is None:
            return ()
        self._conflicts = {pair for pair in self._conflicts if uid not in pair}
        for cidr, owner in entry.owners:
            state = self._pools.get(owner) if owner else None
            if state is not None:
                state.owned.pop(uid, None)
            if quarantine:
                # Held by the quarantine before the Node lets go, so it is never free between.
                self._reserve(cidr, ("quarantine", uid))
                heapq.heappush(self._quarantine, (now + self.reuse_delay, cidr.version, uid, cidr))
            self._unreserve(cidr, ("node", uid))
        return tuple(c for c, _ in entry.owners)

    def expire(self, now: float) -> bool:
        """Free quarantined blocks whose delay has passed; True when any became free."""
        freed = False
        while self._quarantine and self._quarantine[0][0] <= now:
            _, _, uid, cidr = heapq.heappop(self._quarantine)
            freed |= self._unreserve(cidr, ("quarantine", uid))
        return freed

    def next_expiry(self) -> float | None:
        return self._quarantine[0][0] if self._quarantine else None

    # ------------------------------------------------------------ reservations (§5.1)

    def _reserve(self, cidr: IPNetwork, holder: Holder) -> None:
        if self._reservations[cidr.version].add(cidr, holder):
            for blocks in self._sets(cidr.version):
                blocks.occupy(blocks.index_range(cidr))

    def _unreserve(self, cidr: IPNetwork, holder: Holder) -> bool:
        reservations = self._reservations[cidr.version]
        if not reservations.remove(cidr, holder):
            return False
        for blocks in self._sets(cidr.version):
            _release_unreserved(blocks, cidr, reservations)
        return True

    def _sets(self, version: int) -> list[BlockSet]:
        return [s.sets[version] for s in self._pools.values() if version in s.sets]

    # ------------------------------------------------------------ status

    def usage(self, name: str) -> PoolUsage | None:
        """Status numbers of a pool (§1.4); None for an unknown pool."""
        state = self._pools.get(name)
        if state is None:
            return None
        families = tuple(_family_usage(b, state.owned.values()) for b in state.sets.values())
        owned = sum(len(cidrs) for cidrs in state.owned.values())
        return PoolUsage(len(state.owned), owned, families)

    def owned_count(self, name: str) -> int:
        """CIDRs owned by the pool; its finalizer goes once this is 0 (§8)."""
        state = self._pools.get(name)
        return sum(len(c) for c in state.owned.values()) if state else 0

    def unowned_count(self) -> int:
        return sum(1 for e in self._ledger.values() for _, owner in e.owners if owner is None)

    def conflict_count(self) -> int:
        return len(self._conflicts)

    def node_cidrs(self, uid: str) -> Mapping[IPNetwork, str | None]:
        entry = self._ledger.get(uid)
        return dict(entry.owners) if entry else {}


def _release_unreserved(blocks: BlockSet, cidr: IPNetwork, reservations: ReservationSet) -> None:
    """Free the blocks `cidr` touched that no other reservation intersects (§14 rule 4)."""
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


def _family_usage(blocks: BlockSet, owned: Iterable[tuple[IPNetwork, ...]]) -> FamilyUsage:
    spans = sorted(
        (r.start, r.stop) for cidrs in owned for c in cidrs if (r := blocks.index_range(c))
    )
    allocated, end = 0, 0
    for start, stop in spans:  # union of spans: overlapping owned CIDRs count once
        allocated += max(0, stop - max(start, end))
        end = max(end, stop)
    return FamilyUsage(
        blocks.network,
        blocks.block_prefix,
        blocks.capacity,
        allocated,
        max(0, blocks.used - allocated),
        blocks.free,
    )

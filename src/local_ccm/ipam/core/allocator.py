"""Pool choice, allocation, recovery and release for the node IPAM controller.

Pure, no I/O. The `Allocator` is the controller's in-memory state: one
reservation set per family shared by all pools, one `BlockSet` per pool family kept in step
with it, and a ledger of every Node's CIDRs with the pool that owns each one (both in
`ipam.ledger`). The loop feeds it observed objects and API outcomes and writes what it returns;
nothing here raises for odd data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from local_ccm.ipam.core.cidrset import BlockSet, IPNetwork
from local_ccm.ipam.core.ledger import Ledger, Owners, PoolState, PoolUsage
from local_ccm.ipam.core.model import NodeView, Pool
from local_ccm.ipam.core.selector import Match
from local_ccm.records import dataclass

WaitReason = Literal["NoMatchingClusterCIDR", "Exhausted"]
_CANDIDATE_CACHE_LIMIT = 4096


# ---------------------------------------------------------------- ordering


def rank_key(pool: Pool, match: Match | None) -> tuple[int, int, int, int, str, str, str]:
    """Sort key, upstream's order: pools with a selector first, by the keys P0-P5 below, then
    catch-alls by P1, P2, P4, P5, then the default pool from flags. P5 (the name) is ours:
    upstream left complete ties to heap order."""
    group = 2 if pool.is_default else 1 if pool.selector is None else 0
    first = pool.families[0]  # IPv4 when present (families are v4 first)
    return (
        group,
        -(match.requirements if match else 0),  # P0, requirements of the best term, higher first
        pool.capacity,  # P1, lower first: static capacity, not free space
        -first.block_prefix,  # P2, higher first (IPv4's if any: an upstream quirk, kept)
        match.canonical if match else "",  # P3, the canonical selector; UTF-8 byte order
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
    """Nodes that need CIDRs, by creationTimestamp then name."""
    waiting = [n for n in nodes if not n.has_cidrs and not n.deleting]
    return sorted(waiting, key=lambda n: (n.creation_timestamp, n.name))


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class Allocation:
    """CIDRs to write to a Node (IPv4 first), reserved before the write starts."""

    node: str
    uid: str
    pool: str
    cidrs: tuple[IPNetwork, ...]
    tries: int = 1  # pools tried, for the allocation_tries_per_request histogram


@dataclass(frozen=True)
class Waiting:
    """No pool could serve the Node now: a value, not an exception."""

    node: str
    reason: WaitReason
    considered: tuple[str, ...] = ()
    exhausted: tuple[tuple[str, int], ...] = ()  # (pool, IP version without a free block)


@dataclass(frozen=True)
class Skipped:
    """The Node is never allocated: it has CIDRs or is terminating without."""

    node: str
    reason: Literal["HasCIDRs", "Terminating"]


@dataclass(frozen=True)
class Recorded:
    """A Node's existing CIDRs after they were reserved."""

    node: str
    uid: str
    owners: Owners = ()
    conflicts: tuple[str, ...] = ()  # other Nodes whose CIDRs overlap these
    foreign: bool = False  # CIDRs we did not write
    changed: bool = True  # False: nothing new (our own write, or seen before)

    @property
    def unowned(self) -> tuple[IPNetwork, ...]:
        return tuple(cidr for cidr, owner in self.owners if owner is None)


class Allocator:
    """All allocation decisions, serialised in one place."""

    def __init__(
        self,
        *,
        reserved: Sequence[IPNetwork] = (),
        legacy_and_terms: bool = False,
        reuse_delay: float = 0.0,
    ) -> None:
        self.legacy = legacy_and_terms
        self.reuse_delay = reuse_delay
        self._pools: dict[str, PoolState] = {}
        # Its queries (conflicts, unowned CIDRs, a Node's owners) and quarantine are read
        # directly; every change goes through the Allocator, which keeps the pools in step.
        self.ledger = Ledger(self._sets, reserved=reserved, reuse_delay=reuse_delay)
        self._candidates: dict[tuple[object, ...], tuple[str, ...]] = {}

    # ------------------------------------------------------------ pools

    def set_pool(self, pool: Pool, *, ready: bool, uid: str = "") -> tuple[str, ...]:
        """Add or update a pool. A new uid under the same name is a new object: the old one's
        CIDRs become unowned first; returns the names of the Nodes concerned."""
        affected: tuple[str, ...] = ()
        state = self._pools.get(pool.name)
        if state is not None and state.uid != uid:
            affected, state = self.remove_pool(pool.name), None
        if state is not None and state.pool == pool:
            state.ready = ready
        else:
            owned = state.owned if state is not None else {}
            state = PoolState(pool, ready, self._block_sets(pool), uid, owned)
            self._pools[pool.name] = state
        self._candidates.clear()
        return affected

    def remove_pool(self, name: str) -> tuple[str, ...]:
        """Drop a vanished pool at once; its CIDRs stay reserved as unowned. Returns the
        names of the Nodes whose CIDRs it owned (Event `ClusterCIDRRemoved`)."""
        state = self._pools.pop(name, None)
        self._candidates.clear()
        if state is None:
            return ()
        return tuple(sorted(self.ledger.disown(uid, name) for uid in state.owned))

    def pool(self, name: str) -> Pool | None:
        state = self._pools.get(name)
        return state.pool if state else None

    def _block_sets(self, pool: Pool) -> dict[int, BlockSet]:
        return {
            f.version: self.ledger.fill(BlockSet(f.network, f.block_prefix)) for f in pool.families
        }

    def _sets(self, version: int) -> list[BlockSet]:
        return [s.sets[version] for s in self._pools.values() if version in s.sets]

    # ------------------------------------------------------------ choosing

    def candidates(self, node: NodeView) -> tuple[str, ...]:
        """Names of the Ready pools matching `node`, best first (cached per label set)."""
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
        all of them. Asking again for a pending Node returns the same."""
        if node.has_cidrs:
            return Skipped(node.name, "HasCIDRs")
        entry = self.ledger.get(node.uid)
        if entry is not None:
            owner = next((o for _, o in entry.owners if o), "")
            return Allocation(node.name, node.uid, owner, entry.cidrs)
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
        self, state: PoolState, exhausted: list[tuple[str, int]]
    ) -> tuple[IPNetwork, ...] | None:
        picks = []
        for family in state.pool.families:
            blocks = state.sets[family.version]
            index = blocks.lowest_free()
            if index is None:
                exhausted.append((state.pool.name, family.version))
                # All families or none: nothing reserved yet (upstream kept the IPv4 block
                # when IPv6 was exhausted, leaking one per retry).
                return None
            picks.append(blocks.block(index))
        return tuple(picks)

    # ------------------------------------------------------------ write outcomes

    def commit(self, uid: str) -> None:
        """The write landed: the pool owns the CIDRs for good (2xx)."""
        self.ledger.commit(uid)

    def abort(self, uid: str) -> tuple[IPNetwork, ...]:
        """The write certainly did not land (404, other uid): release at once, no quarantine."""
        if not self.is_pending(uid):
            return ()
        return self._drop(uid, quarantine=False)

    def is_pending(self, uid: str) -> bool:
        entry = self.ledger.get(uid)
        return entry is not None and entry.pending

    # ------------------------------------------------------------ existing CIDRs

    def recover(self, nodes: Iterable[NodeView]) -> list[Recorded]:
        """Start-up: reserve every CIDR of every Node, owned or not, so that no other Node can
        receive a block in use (upstream skipped Nodes no pool matched)."""
        return [self.record(n, recovery=True) for n in nodes if n.pod_cidrs]

    def record(self, node: NodeView, *, recovery: bool = False) -> Recorded:
        """Reserve the CIDRs a Node holds. Ours (pending or committed) are confirmed; others
        are foreign unless seen at start-up; they replace a pending allocation of ours."""
        entry = self.ledger.get(node.uid)
        if not node.pod_cidrs:
            return Recorded(node.name, node.uid, changed=False)
        if entry is not None:
            if entry.cidrs == node.pod_cidrs:
                self.commit(node.uid)
                return Recorded(node.name, node.uid, entry.owners, changed=False)
            self._drop(node.uid, quarantine=False)  # theirs landed, so ours did not
        order = [self._pools[name].pool for name in self._order_all(node)]
        owners = tuple((cidr, self._owner(cidr, order)) for cidr in node.pod_cidrs)
        conflicts = self.ledger.conflicting(node.uid, node.pod_cidrs)
        self._hold(node, owners, pending=False)
        return Recorded(node.name, node.uid, owners, conflicts, foreign=not recovery)

    def _order_all(self, node: NodeView) -> list[str]:
        pools = (s.pool for s in self._pools.values())
        return [p.name for p in order_pools(pools, node, legacy=self.legacy)]

    def _owner(self, cidr: IPNetwork, order: Sequence[Pool]) -> str | None:
        """First candidate containing it, else first pool by name containing it."""
        by_name = sorted((s.pool for s in self._pools.values()), key=lambda p: p.name)
        for pool in [*order, *by_name]:
            family = pool.family(cidr.version)
            if family is not None and cidr.subnet_of(family.network):  # type: ignore[arg-type]
                return pool.name
        return None

    def _hold(self, node: NodeView, owners: Owners, *, pending: bool) -> None:
        self.ledger.hold(node.uid, node.name, owners, pending=pending)
        for cidr, owner in owners:
            state = self._pools.get(owner) if owner else None
            if state is not None:
                state.own(node.uid, cidr)

    # ------------------------------------------------------------ release

    def release(self, uid: str, now: float) -> tuple[IPNetwork, ...]:
        """The Node object is gone: free its CIDRs, after `reuse_delay` if set."""
        return self._drop(uid, quarantine=self.reuse_delay > 0, now=now)

    def _drop(self, uid: str, *, quarantine: bool, now: float = 0.0) -> tuple[IPNetwork, ...]:
        entry = self.ledger.drop(uid, quarantine=quarantine, now=now)
        if entry is None:
            return ()
        for _, owner in entry.owners:
            state = self._pools.get(owner) if owner else None
            if state is not None:
                state.disown(uid)
        return entry.cidrs

    # ------------------------------------------------------------ status

    def usage(self, name: str) -> PoolUsage | None:
        """Status numbers of a pool; None for an unknown pool."""
        state = self._pools.get(name)
        return state.usage() if state else None

    def owned_count(self, name: str) -> int:
        """CIDRs owned by the pool; its finalizer goes once this is 0."""
        state = self._pools.get(name)
        return state.owned_cidrs if state else 0

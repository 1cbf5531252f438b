"""Nodes in node-ipam-controller: the sync of one Node's key, its allocation and write.

The `Allocator` (pure, `ipam.core.allocator`) makes every decision, serialised on the event loop;
a Node's write (`ipam.nodewrite`) starts only after its reservation exists and runs in the
sync of the Node's key, so `--concurrent-node-syncs` (the worker count) bounds the writes in
flight and a Node is never written twice at once. A write that did not settle keeps its
reservation and is tried again after the key's backoff.
"""

from __future__ import annotations

import logging
from collections import Counter

from local_ccm.ipam.core import events as ev
from local_ccm.ipam.core.allocator import Allocation, Recorded, Skipped, Waiting, allocation_order
from local_ccm.ipam.core.cidrset import IPNetwork
from local_ccm.ipam.core.model import NodeView, project_node
from local_ccm.ipam.core.status import foreign_managers
from local_ccm.ipam.nodewrite import Aborted, Committed, NodeWriter, Outcome, UnknownOutcomeError
from local_ccm.ipam.upkeep import PoolKeeper, Shared
from local_ccm.kube.errors import ApiError
from local_ccm.logs import kv
from local_ccm.runtime.controller import Done, Fence, RequeueAfter, Result, Retry, open_fence
from local_ccm.runtime.events import EventBudget, Subject, admit, node

log = logging.getLogger(__name__)

FAILED_ATTEMPTS_EVENT = 3  # CIDRAssignmentFailed after this many failed writes [compat]
POOL_KEY = "clustercidr/"  # + the ClusterCIDR's name: its finalizer and release


class NodeWork:
    """What the leader knows and does about Nodes; `sync` decides one Node."""

    def __init__(self, shared: Shared, *, keeper: PoolKeeper, retry_interval: float) -> None:
        self.allocator, self.metrics, self.clock = shared.allocator, shared.metrics, shared.clock
        self.writer = NodeWriter(shared.api, self._write_failed, self._fence)
        self.fence: Fence = open_fence  # the worker's, once `beside` handed it over
        self.outbox, self.keeper = shared.outbox, keeper
        self.retry_interval = retry_interval
        self.nodes: dict[str, NodeView] = {}  # by uid
        self.uids: dict[str, str] = {}  # Node name -> uid
        self.first_seen: dict[str, float] = {}
        self.waiting: dict[str, str] = {}  # uid -> reason
        self.pending: dict[str, Allocation] = {}  # uid -> reserved, its write not settled
        self.failures: Counter[str] = Counter()  # uid -> failed writes of its allocation
        self.unresolved: set[str] = set()  # uids whose last write's outcome is unknown
        self.not_available = EventBudget()  # CIDRNotAvailable: per Node and reason
        self.foreign_of: dict[str, tuple[str, ...]] = {}  # uid -> other podCIDRs managers
        self.foreign_count: Counter[str] = Counter()

    async def _fence(self) -> None:
        await self.fence()

    # ------------------------------------------------------------ recovery

    def recover(self, views: list[NodeView]) -> tuple[int, list[str]]:
        """Reserve every CIDR of every Node. Returns the Nodes with CIDRs and the keys of those
        without, in allocation order."""
        for view in views:
            self.remember(view)
        recorded = self.allocator.recover(views)
        for rec in recorded:
            self.report_recorded(rec, self.nodes[rec.uid], recovery=True)
        for view in views:
            if view.invalid_pod_cidrs:
                self.outbox.once(ev.invalid_pod_cidr(view.invalid_pod_cidrs), self._node(view))
        return len(recorded), [v.name for v in allocation_order(views)]

    def remember(self, view: NodeView) -> None:
        self.nodes[view.uid] = view
        self.uids[view.name] = view.uid
        self._census(view.uid, view)

    def _census(self, uid: str, view: NodeView | None) -> None:
        """Kept current: Nodes whose podCIDRs another field manager owns."""
        new = foreign_managers(view) if view is not None and view.pod_cidrs else ()
        old = self.foreign_of.pop(uid, ())
        if new:
            self.foreign_of[uid] = new
        for manager in set(old) ^ set(new):
            self.foreign_count[manager] += 1 if manager in new else -1
            self.metrics.foreign_nodes.labels(manager).set(self.foreign_count[manager])

    def _node(self, view: NodeView) -> Subject:
        return node(view.name, view.uid)

    def report_recorded(self, rec: Recorded, view: NodeView, *, recovery: bool) -> None:
        subject = self._node(view)
        if rec.conflicts:
            self.outbox.once(ev.conflict(rec.conflicts), subject)
            for other in rec.conflicts:
                other_uid = self.uids.get(other, "")
                self.outbox.once(ev.conflict((view.name,)), node(other, other_uid))
        if rec.unowned and rec.changed:
            self.outbox.once(ev.not_in_any_pool(rec.unowned), subject)
        if rec.foreign and rec.changed and not recovery:
            managers = foreign_managers(view)
            for manager in managers or ("unknown",):
                self.metrics.foreign.labels(manager).inc()
            log.warning(
                "Node %s got podCIDRs %s from %s: run kube-controller-manager with "
                "--allocate-node-cidrs=false", view.name, list(map(str, view.pod_cidrs)),
                ", ".join(managers) or "another writer", extra=kv(node=view.name, uid=view.uid),
            )  # fmt: skip
            self.outbox.emit(ev.other_allocator(managers, view.pod_cidrs), subject)
        for _, owner in rec.owners:
            if owner:
                self.keeper.dirty.add(owner)

    # ------------------------------------------------------------ one Node

    async def sync(self, name: str, view: NodeView | None) -> Result:
        """The Node `name` as cached now (None: gone): record its CIDRs, or allocate and write."""
        known = self.uids.get(name)
        if known is not None and (view is None or view.uid != known):
            others = self._node_gone(known)  # another Node under the name is looked at next
            return Done(others=(*others, name) if view is not None else others)
        if view is None:
            return Done()
        uid, others = view.uid, ()
        if self.allocator.ledger.expire(self.clock.monotonic()):
            others = self.waiting_keys()
        entry = self.allocator.ledger.get(uid)
        if not view.has_cidrs and entry is not None and not entry.pending:
            return Done(others)  # our write landed; its watch event is on the way
        self.remember(view)
        if view.invalid_pod_cidrs:
            self.outbox.once(ev.invalid_pod_cidr(view.invalid_pod_cidrs), self._node(view))
        if view.pod_cidrs:
            return Done((*others, *self._has_cidrs(view)))
        if view.has_cidrs or (view.deleting and uid not in self.pending):
            return Done(others)
        return await self._allocate(view, others)

    def _has_cidrs(self, view: NodeView) -> tuple[str, ...]:
        alloc = self.pending.pop(view.uid, None)
        self._settled(view.uid)
        if alloc is not None and view.pod_cidrs == alloc.cidrs:
            self._committed(alloc, view)  # ours landed; the watch told first
            return ()
        rec = self.allocator.record(view)
        self.waiting.pop(view.uid, None)
        if rec.changed:
            self.report_recorded(rec, view, recovery=False)
        return self.waiting_keys() if alloc is not None else ()  # theirs replaced ours

    def _node_gone(self, uid: str) -> tuple[str, ...]:
        """Release only when the object is gone, by the recorded owner: a Node with a
        deletionTimestamp still exists, and releasing then would hand its block to another
        Node (the bug class of kubernetes/kubernetes#127792). The keys worth a look now."""
        view = self.nodes.pop(uid, None)
        if view is not None and self.uids.get(view.name) == uid:
            del self.uids[view.name]
        self._census(uid, None)
        self.waiting.pop(uid, None)
        self.first_seen.pop(uid, None)
        self.pending.pop(uid, None)
        self._settled(uid)
        owners = self.allocator.ledger.node_cidrs(uid)
        released = self.allocator.release(uid, self.clock.monotonic())
        if not released:
            return ()
        pools: list[str] = []
        for cidr, owner in owners.items():
            if owner:
                self.metrics.releases.labels(str(self._family_net(owner, cidr)), owner).inc()
                self.keeper.dirty.add(owner)
                pools.append(POOL_KEY + owner)
        name = view.name if view else uid
        log.info("released %s of deleted Node %s", ",".join(map(str, released)), name,
                 extra=kv(node=name, uid=uid))  # fmt: skip
        return (*dict.fromkeys(pools), *self.waiting_keys())

    def _settled(self, uid: str) -> None:
        self.failures.pop(uid, None)
        self.unresolved.discard(uid)

    def _family_net(self, pool_name: str, cidr: IPNetwork) -> IPNetwork | str:
        pool = self.allocator.pool(pool_name)
        family = pool.family(cidr.version) if pool else None
        return family.network if family else ""

    def waiting_keys(self) -> tuple[str, ...]:
        """The Nodes waiting for a pool: worth a look whenever blocks may have become free."""
        return tuple(self.nodes[uid].name for uid in self.waiting if uid in self.nodes)

    # ------------------------------------------------------------ allocation

    async def _allocate(self, view: NodeView, others: tuple[str, ...]) -> Result:
        uid = view.uid
        self.first_seen.setdefault(uid, self.clock.monotonic())
        alloc = self.pending.get(uid)
        if alloc is None:
            result = self.allocator.allocate(view)
            if isinstance(result, Waiting):
                self._waits(view, result)
                return RequeueAfter(self._retry_after(), others)
            if isinstance(result, Skipped):
                return Done(others)
            alloc = self.pending[uid] = result
            self.waiting.pop(uid, None)
        try:
            outcome = await self._write(alloc)
        except UnknownOutcomeError as exc:
            self.unresolved.add(uid)
            return Retry(f"the outcome of the write is unknown: {exc}")
        if outcome is None:
            return Retry("the write did not land")
        self.pending.pop(uid, None)
        self._settled(uid)
        return Done((*others, *self._outcome(alloc, outcome)))

    async def _write(self, alloc: Allocation) -> Outcome | None:
        if alloc.uid in self.unresolved:
            outcome = await self.writer.resolve(alloc)
            self.unresolved.discard(alloc.uid)
            if outcome is not None:
                return outcome
        return await self.writer.write(alloc)

    def _outcome(self, alloc: Allocation, outcome: Outcome) -> tuple[str, ...]:
        if isinstance(outcome, Committed):
            self._committed(alloc, project_node(outcome.obj))
            return ()
        if isinstance(outcome, Aborted):
            return self.waiting_keys() if self.allocator.abort(alloc.uid) else ()
        self.remember(outcome.node)  # Replaced: theirs replace ours
        rec = self.allocator.record(outcome.node)
        self.report_recorded(rec, outcome.node, recovery=False)
        return self.waiting_keys()

    def _retry_after(self) -> float:
        """The safety retry of a waiting Node, sooner when a quarantined block frees."""
        expiry = self.allocator.ledger.next_expiry()
        if expiry is None:
            return self.retry_interval
        return max(0.0, min(self.retry_interval, expiry - self.clock.monotonic()))

    def _waits(self, view: NodeView, waiting: Waiting) -> None:
        self.waiting[view.uid] = waiting.reason
        for pool_name, _ in waiting.exhausted:
            self.keeper.dirty.add(pool_name)
        key = (view.uid, waiting.reason)
        self.not_available, ok = admit(self.not_available, key, self.clock.monotonic())
        if ok:
            log.info("Node %s waits: %s", view.name, waiting.reason,
                     extra=kv(node=view.name, uid=view.uid))  # fmt: skip
            self.outbox.emit(ev.not_available(waiting), self._node(view))

    def _write_failed(self, alloc: Allocation, error: ApiError) -> None:
        self.failures[alloc.uid] += 1
        failures = self.failures[alloc.uid]
        self.metrics.patch_failures.labels(str(error.status or "error")).inc()
        if failures == FAILED_ATTEMPTS_EVENT:
            subject = node(alloc.node, alloc.uid)
            self.outbox.emit(ev.assignment_failed(failures, str(error)), subject)

    def _committed(self, alloc: Allocation, view: NodeView) -> None:
        self.allocator.commit(alloc.uid)
        if view.uid == alloc.uid and alloc.uid in self.nodes:
            self.remember(view)
        for cidr in alloc.cidrs:
            net = str(self._family_net(alloc.pool, cidr))
            self.metrics.allocations.labels(net, alloc.pool).inc()
        self.metrics.tries.observe(alloc.tries)
        started = self.first_seen.pop(alloc.uid, None)
        if started is not None:
            self.metrics.latency.observe(self.clock.monotonic() - started)
        self.keeper.dirty.add(alloc.pool)
        texts = ",".join(map(str, alloc.cidrs))
        # No Event [compat]: neither kube-controller-manager's range allocator nor the Go
        # node-ipam-controller posts one on success; the Node shows its podCIDRs, this line
        # and the allocation counter name the pool (docs/ipam.md).
        log.info("assigned %s from %s to Node %s", texts, alloc.pool, alloc.node,
                 extra=kv(node=alloc.node, uid=alloc.uid, clustercidr=alloc.pool))  # fmt: skip

"""Nodes in node-ipam-controller's loop: watch events, allocation passes, Node write outcomes.

Handlers only update projections and queue work; the `Allocator` (pure, `ipam.plan`) makes
every decision, serialised on the event loop; Node writes (`ipam.nodewrite`) run concurrently,
at most `--concurrent-node-syncs` at a time, each started only after its reservation exists.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

from local_ccm.clock import unless_stopped
from local_ccm.ipam.core import events as ev
from local_ccm.ipam.core.cidrset import IPNetwork
from local_ccm.ipam.core.model import NodeView, project_node
from local_ccm.ipam.core.plan import Allocation, Recorded, Waiting, allocation_order
from local_ccm.ipam.core.status import foreign_managers
from local_ccm.ipam.nodeapi import Obj
from local_ccm.ipam.nodewrite import Aborted, Committed, NodeWriter
from local_ccm.ipam.upkeep import PoolKeeper, Shared
from local_ccm.kube.errors import ApiError
from local_ccm.logs import kv
from local_ccm.runtime.events import EventBudget, Subject, admit, node

log = logging.getLogger(__name__)

FAILED_ATTEMPTS_EVENT = 3  # CIDRAssignmentFailed after this many failed writes [compat]


class NodeWork:
    """What the leader knows and does about Nodes; `allocation_loop()` until cancelled."""

    def __init__(
        self,
        shared: Shared,
        *,
        keeper: PoolKeeper,
        concurrency: int,
        retry_interval: float,
        backoff: tuple[float, float],
        fatal: Callable[[], BaseException | None],
    ) -> None:
        self.allocator, self.metrics, self.clock = shared.allocator, shared.metrics, shared.clock
        self.writer = NodeWriter(
            shared.api, shared.clock, backoff, shared.fence, self._write_failed
        )
        self.outbox, self.keeper, self.spawn = shared.outbox, keeper, shared.spawn
        self.retry_interval, self.fatal = retry_interval, fatal
        self.nodes: dict[str, NodeView] = {}  # by uid
        self.uids: dict[str, str] = {}  # Node name -> uid
        self.first_seen: dict[str, float] = {}
        self.todo: set[str] = set()  # uids to try in the next allocation pass
        self.waiting: dict[str, str] = {}  # uid -> reason
        self.writing: set[str] = set()  # uids whose write is in flight
        self.not_available = EventBudget()  # CIDRNotAvailable: per Node and reason
        self.foreign_of: dict[str, tuple[str, ...]] = {}  # uid -> other podCIDRs managers
        self.foreign_count: Counter[str] = Counter()
        self.wake = asyncio.Event()
        self.semaphore = asyncio.Semaphore(concurrency)

    # ------------------------------------------------------------ recovery

    def recover(self, views: list[NodeView]) -> int:
        """Reserve every CIDR of every Node; queue those without. Returns Nodes with CIDRs."""
        for view in views:
            self.remember(view)
        recorded = self.allocator.recover(views)
        for rec in recorded:
            self.report_recorded(rec, self.nodes[rec.uid], recovery=True)
        for view in views:
            if view.invalid_pod_cidrs:
                self.outbox.once(ev.invalid_pod_cidr(view.invalid_pod_cidrs), self._node(view))
        self.todo.update(v.uid for v in views if not v.has_cidrs and not v.deleting)
        self.wake.set()
        return len(recorded)

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

    # ------------------------------------------------------------ watch events

    def on_node_event(self, kind: str, view: NodeView) -> None:
        uid = view.uid
        if kind == "DELETED":
            self._node_gone(uid)
            return
        old = self.nodes.get(uid)
        self.remember(view)
        if view.invalid_pod_cidrs:
            self.outbox.once(ev.invalid_pod_cidr(view.invalid_pod_cidrs), self._node(view))
        if view.pod_cidrs:
            rec = self.allocator.record(view)
            self.todo.discard(uid)
            self.waiting.pop(uid, None)
            if rec.changed:
                self.report_recorded(rec, view, recovery=False)
        elif self._needs_cidrs(view) and (
            old is None or old.labels != view.labels or uid in self.waiting
        ):
            self.todo.add(uid)
            self.wake.set()

    def _needs_cidrs(self, view: NodeView) -> bool:
        return not view.has_cidrs and not view.deleting and view.uid not in self.writing

    def _node_gone(self, uid: str) -> None:
        """Release only when the object is gone, by the recorded owner: a Node with a
        deletionTimestamp still exists, and releasing then would hand its block to another
        Node (the bug class of kubernetes/kubernetes#127792)."""
        view = self.nodes.pop(uid, None)
        if view is not None and self.uids.get(view.name) == uid:
            del self.uids[view.name]
        self._census(uid, None)
        self.todo.discard(uid)
        self.waiting.pop(uid, None)
        self.first_seen.pop(uid, None)
        owners = self.allocator.ledger.node_cidrs(uid)
        released = self.allocator.release(uid, self.clock.monotonic())
        if not released:
            return
        for cidr, owner in owners.items():
            if owner:
                self.metrics.releases.labels(str(self._family_net(owner, cidr)), owner).inc()
                self.keeper.dirty.add(owner)
                self.keeper.plan_finalizer(owner)
        name = view.name if view else uid
        log.info("released %s of deleted Node %s", ",".join(map(str, released)), name,
                 extra=kv(node=name, uid=uid))  # fmt: skip
        self.requeue_waiting()

    def _family_net(self, pool_name: str, cidr: IPNetwork) -> IPNetwork | str:
        pool = self.allocator.pool(pool_name)
        family = pool.family(cidr.version) if pool else None
        return family.network if family else ""

    def requeue_waiting(self) -> None:
        self.todo.update(self.waiting)
        self.wake.set()

    # ------------------------------------------------------------ allocation

    async def allocation_loop(self) -> None:
        while True:
            timeout = self.retry_interval
            expiry = self.allocator.ledger.next_expiry()
            if expiry is not None:
                timeout = max(0.0, min(timeout, expiry - self.clock.monotonic()))
            await unless_stopped(self.clock.sleep(timeout), self.wake)
            if not self.wake.is_set():
                self.requeue_waiting()  # the safety retry, or a quarantine expiry
            self.wake.clear()
            if (fatal := self.fatal()) is not None:
                raise fatal
            if self.allocator.ledger.expire(self.clock.monotonic()):
                self.todo.update(self.waiting)
            self.allocate_pass()

    def allocate_pass(self) -> None:
        views = [self.nodes[u] for u in self.todo if u in self.nodes and u not in self.writing]
        self.todo.clear()
        for view in allocation_order(views):
            self.first_seen.setdefault(view.uid, self.clock.monotonic())
            result = self.allocator.allocate(view)
            if isinstance(result, Allocation):
                self.waiting.pop(view.uid, None)
                self.writing.add(view.uid)
                self.spawn(self._write_node(result), f"write-{view.name}")
            elif isinstance(result, Waiting):
                self._waits(view, result)

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

    async def _write_node(self, alloc: Allocation) -> None:
        try:
            async with self.semaphore:
                outcome = await self.writer.write(alloc)
        finally:
            self.writing.discard(alloc.uid)
        if isinstance(outcome, Committed):
            self._committed(alloc, outcome.obj)
        elif isinstance(outcome, Aborted):
            if self.allocator.abort(alloc.uid):
                self.requeue_waiting()
        else:  # Replaced: theirs replace ours
            self.remember(outcome.node)
            rec = self.allocator.record(outcome.node)
            self.report_recorded(rec, outcome.node, recovery=False)
            self.requeue_waiting()

    def _write_failed(self, alloc: Allocation, failures: int, error: ApiError) -> None:
        self.metrics.patch_failures.labels(str(error.status or "error")).inc()
        if failures == FAILED_ATTEMPTS_EVENT:
            subject = node(alloc.node, alloc.uid)
            self.outbox.emit(ev.assignment_failed(failures, str(error)), subject)

    def _committed(self, alloc: Allocation, obj: Obj) -> None:
        self.allocator.commit(alloc.uid)
        view = project_node(obj)
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
        log.info("assigned %s from %s to Node %s", texts, alloc.pool, alloc.node,
                 extra=kv(node=alloc.node, uid=alloc.uid, clustercidr=alloc.pool))  # fmt: skip
        self.outbox.emit(ev.assigned(alloc.pool, alloc.cidrs), node(alloc.node, alloc.uid))

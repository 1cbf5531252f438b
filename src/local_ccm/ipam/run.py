"""The loop of node-ipam-controller: what the leader does.

Nodes and allocation live in `ipam.nodes`, ClusterCIDR finalizers and status in `ipam.upkeep`,
Events in `runtime.outbox`; nothing but an allocation waits for anything.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any

from local_ccm import names
from local_ccm.clock import Clock
from local_ccm.ipam.core import events as ev
from local_ccm.ipam.core.cidrset import IPNetwork
from local_ccm.ipam.core.model import (
    ClusterCIDR,
    InvalidClusterCIDR,
    NodeView,
    Pool,
    project_cluster_cidr,
    project_node,
)
from local_ccm.ipam.core.plan import Allocator
from local_ccm.ipam.core.status import pool_readiness
from local_ccm.ipam.metrics import IpamMetrics
from local_ccm.ipam.nodeapi import IpamApi, Obj, Watched
from local_ccm.ipam.nodes import NodeWork
from local_ccm.ipam.readiness import WatchState, observe_watch, readiness, watch_problems
from local_ccm.ipam.upkeep import PoolKeeper, Shared
from local_ccm.kube.errors import ApiError
from local_ccm.kube.informer import Change, Informer, ListWatch
from local_ccm.kube.request import WatchEvent
from local_ccm.logs import V2, kv
from local_ccm.records import dataclass
from local_ccm.runtime.events import Reporter, node
from local_ccm.runtime.outbox import EventOutbox

log = logging.getLogger(__name__)

FINALIZER_SETTLE = 10.0
FATAL_TASKS = ("nodes", "clustercidrs", "status", "events", "discovery")


@dataclass(frozen=True)
class Settings:
    event_namespace: str = "default"
    concurrent_node_syncs: int = 20
    status_interval: float = 5.0
    default_pool: Pool | None = None
    reserved: tuple[IPNetwork, ...] = ()
    legacy_and_terms: bool = False
    reuse_delay: float = 0.0
    # Without the ClusterCIDR CRD the flag pool is used and discovery re-checked this often,
    # so a CRD installed later is used without a restart.
    discovery_interval: float = 60.0
    retry_interval: float = 60.0  # safety retry of waiting Nodes
    backoff: tuple[float, float] = (0.5, 10.0)  # first and longest retry delay of a write
    instance: str = names.IPAM


class Controller:
    """The leader's state and work; `run()` until cancelled."""

    def __init__(
        self,
        api: IpamApi,
        settings: Settings,
        metrics: IpamMetrics,
        clock: Clock,
        *,
        may_write: Callable[[], bool] = lambda: True,
        rng: random.Random | None = None,
        nodes: ListWatch | None = None,  # the Nodes' list and watch, else the API's own
    ) -> None:
        self.api, self.settings, self.metrics, self.clock = api, settings, metrics, clock
        self.nodes = nodes
        self.may_write = may_write
        self.allocator = Allocator(
            reserved=settings.reserved,
            legacy_and_terms=settings.legacy_and_terms,
            reuse_delay=settings.reuse_delay,
        )
        self.outbox = EventOutbox(
            api, clock, Reporter(names.IPAM, settings.instance), namespace=settings.event_namespace,
            capacity=ev.EVENT_QUEUE, on_drop=metrics.events_dropped.inc, failure_level=V2,
        )  # fmt: skip
        shared = Shared(api, self.allocator, metrics, clock, self.outbox, self._spawn, self._fence)
        self.keeper = PoolKeeper(
            shared, status_interval=settings.status_interval, retry_delay=settings.backoff[0],
            on_finalizer_added=lambda obj: self.on_pool_event(WatchEvent("MODIFIED", obj)),
        )  # fmt: skip
        self.pools = self.keeper.pools
        self.work = NodeWork(
            shared, keeper=self.keeper, concurrency=settings.concurrent_node_syncs,
            retry_interval=settings.retry_interval, backoff=settings.backoff,
            fatal=lambda: self._fatal,
        )  # fmt: skip
        self.watches: dict[Watched, WatchState] = {}
        self.informers: dict[Watched, Informer[Any]] = {}
        self.rng = rng or random.Random()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.recovered = False
        self.crd_served = False
        self._fatal: BaseException | None = None
        if settings.default_pool is not None:
            self.allocator.set_pool(settings.default_pool, ready=True)

    # ------------------------------------------------------------ health

    def ready(self) -> tuple[bool, str]:
        pool_source = self.crd_served or self.settings.default_pool is not None
        now = self.clock.monotonic()  # looked at now: the status tick may be held by a write
        problems = watch_problems(self._observed(now).items(), now)
        return readiness(recovered=self.recovered, pool_source=pool_source, problems=problems)

    def observe_watches(self) -> None:
        self.watches = self._observed(self.clock.monotonic())

    def _observed(self, now: float) -> dict[Watched, WatchState]:
        return {what: observe_watch(state, self.informers[what].status(), now)
                for what, state in list(self.watches.items())}  # fmt: skip

    def _informer(self, what: Watched) -> Informer[Any]:
        """Started as a task named after `what` (a fatal one); its changes go to the handlers."""

        project: Callable[[Obj], Any] = project_node if what == "nodes" else dict
        informer: Informer[Any] = Informer(
            (what == "nodes" and self.nodes) or self.api.list_watch(what), project,
            clock=self.clock, rng=self.rng, name=what,
            on_end=self.metrics.watch_ended(what),
        )  # fmt: skip
        informer.add_handler(self._on_node_change if what == "nodes" else self._on_pool_change)
        self.informers[what] = informer
        self.watches.setdefault(what, WatchState())
        self._spawn(informer.run(), what)
        return informer

    def _on_node_change(self, change: Change[NodeView]) -> None:
        if change.type == "SYNCED" and not self.recovered:
            self._recover(list(self.informers["nodes"].cache.values()))
        elif self.recovered and change.type in ("ADDED", "MODIFIED", "DELETED"):
            view = change.new if change.new is not None else change.old
            if view is not None:
                self.work.on_node_event(change.type, view)

    def _on_pool_change(self, change: Change[Obj]) -> None:
        obj = change.new if change.new is not None else change.old
        if obj is not None and change.type in ("ADDED", "MODIFIED", "DELETED"):
            self.on_pool_event(WatchEvent(change.type, obj))

    # ------------------------------------------------------------ run

    async def run(self) -> None:
        """Discovery, pools, Nodes, recovery; then watch and allocate until cancelled."""
        self.crd_served = await self._retry(self.api.cluster_cidrs_served, "discovery")
        if self.crd_served:
            await self._until_synced(self._informer("clustercidrs"))
        elif self.settings.default_pool is None:
            log.warning("no ClusterCIDR API and no --cluster-cidr: nothing can be allocated")
        await self._until_synced(self._informer("nodes"))  # recovers on the first SYNCED
        if not self.crd_served:
            self._spawn(self._discover(), "discovery")
        self._spawn(self.keeper.status_loop(self._tick), "status")
        self._spawn(self.outbox.run(), "events")
        try:
            await self._finalizers_settled()
            await self.work.allocation_loop()
        finally:
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

    def _tick(self) -> None:
        self.observe_watches()
        self.update_gauges()

    async def _finalizers_settled(self) -> None:
        """Missing finalizers are written before the first allocation, so
        pools that exist at start-up serve the Nodes waiting then (bounded wait)."""
        deadline = self.clock.monotonic() + FINALIZER_SETTLE
        while self.keeper.finalizing and self.clock.monotonic() < deadline:
            await self.clock.sleep(0.05)

    async def _retry(self, call: Callable[[], Any], what: str) -> Any:
        """Retry with capped backoff, never exit."""
        delay = self.settings.backoff[0]
        while True:
            try:
                return await call()
            except ApiError as exc:
                log.warning("%s failed: %s; retry in %.1fs", what, exc, delay)
                await self.clock.sleep(delay)
                delay = min(delay * 2, self.settings.backoff[1])

    async def _until_synced(self, informer: Informer[Any]) -> None:
        """Wait for its first snapshot; an informer that failed before raises its error."""
        synced = asyncio.ensure_future(informer.wait_synced())
        task = next(t for t in self.tasks if t.get_name() == informer.name)
        try:
            await asyncio.wait({synced, task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            synced.cancel()
        if not informer.has_synced():
            task.result()

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        task.set_name(name)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            log.error("task %s failed: %r", task.get_name(), exc, exc_info=exc)
            if task.get_name() in FATAL_TASKS:
                self._fatal = exc
                self.work.wake.set()

    async def _fence(self) -> None:
        """No write starts late in a renewal window."""
        while not self.may_write():
            await self.clock.sleep(0.1)

    # ------------------------------------------------------------ recovery

    def _recover(self, views: list[NodeView]) -> None:
        with_cidrs = self.work.recover(views)
        self.recovered = self.keeper.active = True
        log.info(
            "recovered %d Nodes (%d with CIDRs) and %d ClusterCIDRs",
            len(views), with_cidrs, len(self.pools),
        )  # fmt: skip
        for name in list(self.pools):
            self.keeper.plan_finalizer(name)
            self.keeper.dirty.add(name)
        self.update_gauges()

    # ------------------------------------------------------------ ClusterCIDR events

    def on_pool_event(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        name = str(meta.get("name", ""))
        if event.type == "DELETED":
            self._pool_gone(name)
            return
        cc = project_cluster_cidr(event.object)
        self.keeper.seen(cc, dict(event.object.get("status") or {}))
        self._apply_pool(cc)

    def _apply_pool(self, cc: ClusterCIDR | InvalidClusterCIDR) -> None:
        subject = ev.pool(cc.name, cc.uid)
        generation = str(cc.generation)
        if isinstance(cc, InvalidClusterCIDR):
            self._pool_removed_nodes(cc.name, self.allocator.remove_pool(cc.name))
            self.outbox.once(ev.invalid_pool(cc.reason), subject, generation)
        else:
            reason, _ = pool_readiness(cc)
            pool = cc.pool()
            affected = self.allocator.set_pool(pool, ready=reason == "Ready", uid=cc.uid)
            self._pool_removed_nodes(cc.name, affected)
            if cc.frozen:
                self.outbox.once(ev.spec_changed(), subject, generation)
            if pool.selector is not None and pool.selector.semantics_differ():
                self.outbox.once(ev.semantics_differ(), subject, generation)
            if reason == "Ready":
                self.work.requeue_waiting()
        self.keeper.dirty.add(cc.name)
        self.keeper.plan_finalizer(cc.name)

    def _pool_gone(self, name: str) -> None:
        """Dropped at once; CIDRs it still owned stay reserved as unowned."""
        self.keeper.forget(name)
        self._pool_removed_nodes(name, self.allocator.remove_pool(name))
        self.metrics.remove_pool(name)
        log.info("ClusterCIDR %s is gone", name, extra=kv(clustercidr=name))

    def _pool_removed_nodes(self, pool_name: str, node_names: tuple[str, ...]) -> None:
        for node_name in node_names:
            subject = node(node_name, self.work.uids.get(node_name, ""))
            self.outbox.emit(ev.pool_removed(pool_name), subject)

    # ------------------------------------------------------------ gauges

    def update_gauges(self) -> None:
        states = {"ready": 0, "invalid": 0, "frozen": 0, "terminating": 0}
        key = {"Invalid": "invalid", "SpecChanged": "frozen", "Terminating": "terminating"}
        for cc in self.pools.values():
            states[key.get(pool_readiness(cc)[0], "ready")] += 1
        for state, count in states.items():
            self.metrics.pools.labels(state).set(count)
        pending = len(self.work.writing)
        reasons = {"no_matching_clustercidr": 0, "exhausted": 0, "write_pending": pending}
        for why in self.work.waiting.values():
            reasons["exhausted" if why == "Exhausted" else "no_matching_clustercidr"] += 1
        for label, count in reasons.items():
            self.metrics.waiting.labels(label).set(count)
        self.metrics.unowned.set(self.allocator.ledger.unowned_count())
        self.metrics.conflicts.set(self.allocator.ledger.conflict_count())
        default = self.settings.default_pool
        if default is not None:
            usage = self.allocator.usage(default.name)
            if usage is not None:
                self.metrics.set_pool(default.name, usage)

    # ------------------------------------------------------------ discovery

    async def _discover(self) -> None:
        while not self.crd_served:
            await self.clock.sleep(self.settings.discovery_interval)
            try:
                self.crd_served = await self.api.cluster_cidrs_served()
            except ApiError as exc:
                log.warning("discovery failed: %s", exc)
        log.info("the ClusterCIDR API is served now; watching ClusterCIDRs")
        await self._until_synced(self._informer("clustercidrs"))

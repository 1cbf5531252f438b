"""node-ipam-controller as a controller of the kit (`runtime.controller`): what the leader
decides; `runtime.worker.Worker` runs it.

It watches Nodes and ClusterCIDRs (the latter behind discovery, `ipam.discovery`), and once
both are listed rebuilds the allocation ledger from the listed Nodes' spec.podCIDRs, never from
memory (`synced`). Keys: a Node's name (record its CIDRs, or allocate and write them:
`ipam.nodes`) and `clustercidr/<name>` (apply the pool, keep its finalizer: `ipam.upkeep`).
Beside the syncs run the status loop, the Event outbox and the discovery loop.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any

from local_ccm import names
from local_ccm.clock import Clock
from local_ccm.ipam.api import IpamApi, Obj, Watched
from local_ccm.ipam.core import events as ev
from local_ccm.ipam.core.allocator import Allocator
from local_ccm.ipam.core.cidrset import IPNetwork
from local_ccm.ipam.core.model import (
    ClusterCIDR,
    InvalidClusterCIDR,
    NodeView,
    Pool,
    project_cluster_cidr,
    project_node,
)
from local_ccm.ipam.core.status import pool_readiness
from local_ccm.ipam.discovery import PoolSource
from local_ccm.ipam.metrics import IpamMetrics
from local_ccm.ipam.nodes import POOL_KEY, NodeWork
from local_ccm.ipam.readiness import WatchState, observe_watch, readiness, watch_problems
from local_ccm.ipam.upkeep import Again, PoolKeeper, Shared
from local_ccm.kube.informer import Change, Informer, ListWatch, StreamEnd
from local_ccm.logs import V2, kv
from local_ccm.records import dataclass
from local_ccm.runtime import events as rev
from local_ccm.runtime.controller import Done, Fence, Permission, RequeueAfter, Result, Retry, Watch
from local_ccm.runtime.events import Reporter, node
from local_ccm.runtime.outbox import EventOutbox
from local_ccm.runtime.parts import LastWrites

log = logging.getLogger(__name__)

NAME = "node-ipam"
GROUP = "networking.x-k8s.io"
FINALIZER_SETTLE = 10.0
SETTLE_POLL = 0.05
STARTUP = "startup"  # the key that lets the Nodes of the recovery go once finalizers settled


def permissions(*, event_namespace: str) -> tuple[Permission, ...]:
    """The RBAC the controller needs (the chart's ClusterRole for it, Events the
    `--event-namespace` Role); leader election adds its own."""
    verbs = ("get", "list", "watch", "patch")
    return (
        Permission("", "nodes", verbs),
        Permission(GROUP, "clustercidrs", verbs),
        Permission(GROUP, "clustercidrs/status", ("patch",)),
        Permission("", "events", ("create",), namespace=event_namespace),
    )


@dataclass(frozen=True)
class Settings:
    event_namespace: str = "default"
    concurrent_node_syncs: int = 20  # the worker count
    status_interval: float = 5.0
    default_pool: Pool | None = None
    reserved: tuple[IPNetwork, ...] = ()
    legacy_and_terms: bool = False
    reuse_delay: float = 0.0
    # Without the ClusterCIDR CRD the flag pool is used and discovery re-checked this often,
    # so a CRD installed later is used without a restart.
    discovery_interval: float = 60.0
    retry_interval: float = 60.0  # safety retry of waiting Nodes
    backoff: tuple[float, float] = (0.5, 10.0)  # first and longest retry delay of a key
    instance: str = names.IPAM


class Controller:
    """The leader's state and decisions for one term (`runtime.controller.Controller`): a new
    leader starts from a fresh LIST."""

    name = NAME

    def __init__(
        self,
        api: IpamApi,
        settings: Settings,
        metrics: IpamMetrics,
        clock: Clock,
        *,
        rng: random.Random | None = None,
        nodes: ListWatch | None = None,  # the Nodes' list and watch, else the API's own
    ) -> None:
        self.api, self.settings, self.metrics, self.clock = api, settings, metrics, clock
        self.permissions = permissions(event_namespace=settings.event_namespace)
        self.allocator = Allocator(
            reserved=settings.reserved,
            legacy_and_terms=settings.legacy_and_terms,
            reuse_delay=settings.reuse_delay,
        )
        self.outbox = EventOutbox(
            api, clock, Reporter(names.IPAM, settings.instance), namespace=settings.event_namespace,
            capacity=ev.EVENT_QUEUE, on_drop=metrics.events_dropped.inc, failure_level=V2,
        )  # fmt: skip
        shared = Shared(api, self.allocator, metrics, clock, self.outbox)
        self.keeper = PoolKeeper(shared, status_interval=settings.status_interval,
                                 retry_delay=settings.backoff[0])  # fmt: skip
        self.pools = self.keeper.pools
        self.work = NodeWork(shared, keeper=self.keeper, retry_interval=settings.retry_interval)
        self.rng = rng or random.Random()
        self.source = PoolSource(api, clock, settings.backoff)
        self.watches_seen: dict[Watched, WatchState] = {}
        self.informers: dict[Watched, Informer[Any]] = {
            "clustercidrs": self._informer("clustercidrs", self.source, dict),
            "nodes": self._informer("nodes", nodes or api.list_watch("nodes"), project_node),
        }
        self.written = LastWrites()  # a pool's finalizer write, see _fresh
        # Nodes of the recovery and since, in order, until finalizers settled (a dict: the
        # watch checks it for every Node event of the start-up)
        self.held: dict[str, None] = {}
        self.starting = True  # until `_startup` let the held Nodes go
        self.settling: set[str] = set()  # pools whose first finalizer write is due
        self.settle_until = 0.0
        self.recovered = False
        if settings.default_pool is not None:
            self.allocator.set_pool(settings.default_pool, ready=True)

    def _informer(self, what: Watched, source: ListWatch, project: Any) -> Informer[Any]:
        ended = self.metrics.watch_ended(what)

        def on_end(end: StreamEnd) -> None:
            if what == "clustercidrs" and self.source.switched:
                self.source.switched = False  # discovery ended the empty watch: no restart
                return
            ended(end)

        self.watches_seen[what] = WatchState()
        informer: Informer[Any] = Informer(source, project, clock=self.clock, rng=self.rng,
                                           name=what, on_end=on_end)  # fmt: skip
        return informer

    @property
    def crd_served(self) -> bool:
        return bool(self.source.served)

    # ------------------------------------------------------------ the contract

    def watches(self) -> Sequence[Watch]:
        return [Watch(self.informers["clustercidrs"], self._pool_changed),
                Watch(self.informers["nodes"], self._node_changed)]  # fmt: skip

    def synced(self) -> Iterable[str]:
        return self._recover()

    def beside(self, fence: Fence) -> Sequence[Coroutine[Any, Any, None]]:
        self.work.fence = fence  # a Node's write after a slow GET waits for it
        return [
            self.keeper.status_loop(fence, self._tick),
            self.outbox.run(),
            self.source.discover(self.settings.discovery_interval),
        ]

    async def sync(self, key: str) -> Result:
        if key == STARTUP:
            return self._startup()
        if key.startswith(POOL_KEY):
            return await self._sync_pool(key.removeprefix(POOL_KEY))
        return await self.work.sync(key, self.informers["nodes"].cache.get(key))

    def subject(self, key: str) -> rev.Subject | None:
        return None  # its own Events tell of failed writes (CIDRAssignmentFailed)

    def emit(self, spec: rev.EventSpec, subject: rev.Subject) -> None:
        self.outbox.once(spec, subject, spec.message)

    def ready(self) -> tuple[bool, str]:
        pool_source = self.crd_served or self.settings.default_pool is not None
        now = self.clock.monotonic()  # looked at now: the status tick may be held by a write
        problems = watch_problems(self._observed(now).items(), now)
        return readiness(recovered=self.recovered, pool_source=pool_source, problems=problems)

    # ------------------------------------------------------------ watches

    def observe_watches(self) -> None:
        self.watches_seen = self._observed(self.clock.monotonic())

    def _observed(self, now: float) -> dict[Watched, WatchState]:
        return {what: observe_watch(state, self.informers[what].status(), now)
                for what, state in list(self.watches_seen.items())}  # fmt: skip

    # Before the recovery, changes only fill the caches: `synced` names the keys to start with.

    def _node_changed(self, change: Change[NodeView]) -> Iterable[str]:
        if not self.recovered:
            return []
        if change.type == "DELETED":
            return [change.key]
        if self.starting:  # a Node that comes while the pools' finalizers settle waits too:
            self.held.setdefault(change.key)  # else the flag pool would serve it first
            return []
        # The watch's echo of our own write shows the Node as its PATCH answered, which the
        # write's outcome already recorded: no news, no sync (one per allocated Node).
        new = change.new
        if new is None or new == change.old or self.work.nodes.get(new.uid) == new:
            return []
        return [change.key] if change.type in ("ADDED", "MODIFIED") else []

    def _pool_changed(self, change: Change[Obj]) -> Iterable[str]:
        if self.recovered and change.type in ("ADDED", "MODIFIED", "DELETED"):
            return [POOL_KEY + change.key]
        return []

    def _tick(self) -> None:
        self.observe_watches()
        self.update_gauges()

    # ------------------------------------------------------------ recovery

    def _recover(self) -> list[str]:
        """Pools, then the ledger from the listed Nodes; the keys to start with: the pools
        first, the Nodes without CIDRs once missing finalizers were written (bounded wait), so
        pools that exist at start-up serve the Nodes waiting then."""
        if not self.crd_served and self.settings.default_pool is None:
            log.warning("no ClusterCIDR API and no --cluster-cidr: nothing can be allocated")
        for obj in self.informers["clustercidrs"].cache.values():
            cc = project_cluster_cidr(obj)
            self.keeper.seen(cc, dict(obj.get("status") or {}))
            self._apply_pool(cc)
        views = list(self.informers["nodes"].cache.values())
        with_cidrs, todo = self.work.recover(views)
        self.recovered = True
        log.info(
            "recovered %d Nodes (%d with CIDRs) and %d ClusterCIDRs",
            len(views), with_cidrs, len(self.pools),
        )  # fmt: skip
        self.keeper.dirty.update(self.pools)
        self.settling = {name for name in self.pools if self.keeper.needs_finalizer_write(name)}
        self.settle_until = self.clock.monotonic() + FINALIZER_SETTLE
        self.held = dict.fromkeys(todo)
        self.update_gauges()
        return [*(POOL_KEY + name for name in self.pools), STARTUP]

    def _startup(self) -> Result:
        if self.settling and self.clock.monotonic() < self.settle_until:
            return RequeueAfter(SETTLE_POLL)
        held, self.held, self.starting = tuple(self.held), {}, False
        return Done(others=held)

    # ------------------------------------------------------------ one ClusterCIDR

    async def _sync_pool(self, name: str) -> Result:
        obj = self._fresh(name)
        if obj is None:
            if name in self.pools:
                self._pool_gone(name)
            return Done()
        cc = project_cluster_cidr(obj)
        self.keeper.seen(cc, dict(obj.get("status") or {}))
        others = self._apply_pool(cc)
        try:
            kept = await self.keeper.keep_finalizer(name)
        finally:
            self.settling.discard(name)
        if isinstance(kept, Again):
            return Retry("finalizer") if kept.seconds is None else RequeueAfter(kept.seconds)
        if kept is not None:  # added: ready now, the waiting Nodes are served
            self.written.wrote(name, obj, kept)
            written = project_cluster_cidr(kept)
            self.keeper.seen(written, dict(kept.get("status") or {}))
            others = (*others, *self._apply_pool(written))
        return Done(others=tuple(dict.fromkeys(others)))

    def _fresh(self, name: str) -> Obj | None:
        """The cached pool, or what this controller's finalizer write returned while the cache
        still shows the version that write replaced (`LastWrites`)."""
        obj: Obj | None = self.informers["clustercidrs"].cache.get(name)
        return self.written.fresh(name, obj)

    def _apply_pool(self, cc: ClusterCIDR | InvalidClusterCIDR) -> tuple[str, ...]:
        """The pool as the allocator uses it; the Nodes worth a look now."""
        subject = ev.pool(cc.name, cc.uid)
        generation = str(cc.generation)
        others: tuple[str, ...] = ()
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
                others = self.work.waiting_keys()
        self.keeper.dirty.add(cc.name)
        return others

    def _pool_gone(self, name: str) -> None:
        """Dropped at once; CIDRs it still owned stay reserved as unowned."""
        self.keeper.forget(name)
        self.written.forget(name)
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
        pending = len(self.work.pending)
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

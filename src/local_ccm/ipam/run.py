"""The loop of node-ipam-controller (spec/ipam.md §5-§10, §15): what the leader does.

Handlers only update projections and queue work; the `Allocator` (pure, `ipam.plan`) makes
every decision, serialised on the event loop; Node writes run concurrently, at most
`--concurrent-node-syncs` at a time, each guarded by `test /metadata/uid`. Finalizer writes
are guarded by `test /metadata/resourceVersion` (add) or a `test` of the entry (remove).
Status writes and Events run in their own tasks and never delay an allocation.

Error policy of a Node write (§5.4 rule 3): 404 → release; 409/422 → quorum GET and decide;
anything else → keep the reservation, back off, GET until the outcome is known.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from local_ccm import names
from local_ccm.clock import Clock
from local_ccm.ipam import events as ev
from local_ccm.ipam.cidrset import IPNetwork
from local_ccm.ipam.metrics import IpamMetrics
from local_ccm.ipam.model import (
    FINALIZER,
    ClusterCIDR,
    InvalidClusterCIDR,
    NodeView,
    Pool,
    project_cluster_cidr,
    project_node,
)
from local_ccm.ipam.nodeapi import IpamApi, Obj
from local_ccm.ipam.plan import (
    Allocation,
    Allocator,
    PoolUsage,
    Recorded,
    Waiting,
    allocation_order,
    plan_finalizer,
    pool_readiness,
)
from local_ccm.kube.errors import ApiError, Conflict, Invalid, NotFound
from local_ccm.kube.request import WatchEvent
from local_ccm.kube.watch import SYNCED
from local_ccm.logs import V2, kv

log = logging.getLogger(__name__)

CC = ClusterCIDR | InvalidClusterCIDR
FAILED_ATTEMPTS_EVENT = 3  # §5.4 rule 4
EVENT_QUEUE = 1000
FINALIZER_SETTLE = 10.0


@dataclass(frozen=True)
class Settings:
    event_namespace: str = "default"
    concurrent_node_syncs: int = 20
    status_interval: float = 5.0
    default_pool: Pool | None = None
    reserved: tuple[IPNetwork, ...] = ()
    legacy_and_terms: bool = False
    reuse_delay: float = 0.0
    discovery_interval: float = 60.0  # §6 rule 1, §11 rule 4
    retry_interval: float = 60.0  # safety retry of waiting Nodes (§9 rule 4)
    backoff: tuple[float, float] = (0.5, 10.0)  # first and longest retry delay of a write
    instance: str = names.IPAM


# ---------------------------------------------------------------- pure helpers


def node_patch(uid: str, cidrs: tuple[IPNetwork, ...]) -> list[Obj]:
    """§5.4 rule 2: guarded by the uid seen; IPv4 first (the Allocator orders families)."""
    texts = [str(c) for c in cidrs]
    return [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "add", "path": "/spec/podCIDR", "value": texts[0]},
        {"op": "add", "path": "/spec/podCIDRs", "value": texts},
    ]


def add_finalizer_patch(cc: CC) -> list[Obj]:
    """§1.6 rule 2: guarded by the resourceVersion the decision was made on."""
    test = {"op": "test", "path": "/metadata/resourceVersion", "value": cc.resource_version}
    if not cc.finalizers:
        return [test, {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}]
    return [test, {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}]


def remove_finalizer_patch(cc: CC) -> list[Obj]:
    """§1.6 rule 3: `test` on the entry, then `remove`."""
    path = f"/metadata/finalizers/{cc.finalizers.index(FINALIZER)}"
    return [{"op": "test", "path": path, "value": FINALIZER}, {"op": "remove", "path": path}]


def _condition(kind: str, status: bool, reason: str, message: str, generation: int) -> Obj:
    value = "True" if status else "False"
    return {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


def desired_status(cc: CC, usage: PoolUsage | None) -> Obj:
    """§1.4 without `lastTransitionTime` (kept or stamped by `with_transition_times`)."""
    reason, message = pool_readiness(cc)
    conditions = [_condition("Ready", reason == "Ready", reason, message, cc.generation)]
    status: Obj = {"observedGeneration": cc.generation, "nodes": usage.nodes if usage else 0}
    if usage is not None:
        for fam in usage.families:
            status[f"ipv{fam.network.version}"] = {
                "blockPrefixLength": fam.block_prefix,
                "capacity": fam.capacity,
                "allocated": fam.allocated,
                "unavailable": fam.unavailable,
                "free": fam.free,
            }
        full = usage.exhausted_versions
        text = "no free block in " + ", ".join(f"IPv{v}" for v in full) if full else "free blocks"
        why = "NoFreeBlocks" if full else "FreeBlocksAvailable"
        conditions.append(_condition("Exhausted", bool(full), why, text, cc.generation))
    status["conditions"] = conditions
    return status


def with_transition_times(desired: Obj, current: Mapping[str, Any] | None, now: str) -> Obj:
    """Keep `lastTransitionTime` of conditions whose status did not change."""
    before = {c.get("type"): c for c in (current or {}).get("conditions") or []}
    conditions = []
    for cond in desired["conditions"]:
        old = before.get(cond["type"])
        same = old is not None and old.get("status") == cond["status"]
        stamp = old.get("lastTransitionTime") if same and old else now
        conditions.append({**cond, "lastTransitionTime": stamp or now})
    return {**desired, "conditions": conditions}


def status_differs(desired: Obj, current: Mapping[str, Any] | None) -> bool:
    """Compare ignoring `lastTransitionTime` (§1.4: skipped when unchanged)."""

    def strip(status: Mapping[str, Any] | None) -> Obj:
        status = dict(status or {})
        conds = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in status.get("conditions") or []
        ]
        return {**status, "conditions": conds}

    return strip(desired) != strip(current)


def foreign_managers(view: NodeView) -> tuple[str, ...]:
    return tuple(m for m in view.pod_cidrs_managers if m != names.IPAM)


# ---------------------------------------------------------------- the controller


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
    ) -> None:
        self.api, self.settings, self.metrics, self.clock = api, settings, metrics, clock
        self.may_write = may_write
        self.allocator = Allocator(
            reserved=settings.reserved,
            legacy_and_terms=settings.legacy_and_terms,
            reuse_delay=settings.reuse_delay,
        )
        self.pools: dict[str, CC] = {}
        self.pool_status: dict[str, Obj] = {}  # status as last read or written
        self.nodes: dict[str, NodeView] = {}  # by uid
        self.uids: dict[str, str] = {}  # Node name -> uid
        self.first_seen: dict[str, float] = {}
        self.todo: set[str] = set()  # uids to try in the next allocation pass
        self.waiting: dict[str, str] = {}  # uid -> reason
        self.writing: set[str] = set()
        self.finalizing: set[str] = set()
        self.dirty: set[str] = set()
        self.status_at: dict[str, float] = {}
        self.exhausted: dict[str, tuple[int, ...]] = {}
        self.noted: set[tuple[str, ...]] = set()
        self.not_available_at: dict[tuple[str, str], float] = {}
        self.events: asyncio.Queue[ev.EventSpec] = asyncio.Queue(EVENT_QUEUE)
        self.wake = asyncio.Event()
        self.semaphore = asyncio.Semaphore(settings.concurrent_node_syncs)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.recovered = False
        self.crd_served = False
        self._fatal: BaseException | None = None
        if settings.default_pool is not None:
            self.allocator.set_pool(settings.default_pool, ready=True)

    # ------------------------------------------------------------ health

    def ready(self) -> tuple[bool, str]:
        """§15.3 for the leader: recovery done and some pool source exists (§11 rule 5)."""
        if not self.recovered:
            return False, "start-up recovery has not finished"
        if not self.crd_served and self.settings.default_pool is None:
            return False, "no ClusterCIDR API and no --cluster-cidr: nothing can be allocated"
        return True, "ok"

    # ------------------------------------------------------------ run

    async def run(self) -> None:
        """§6: discovery, pools, Nodes, recovery; then watch and allocate until cancelled."""
        self.crd_served = await self._retry(self.api.cluster_cidrs_served, "discovery")
        pool_stream = self.api.watch("clustercidrs") if self.crd_served else None
        if pool_stream is not None:
            await self._until_synced(pool_stream, self.on_pool_event)
        if self.settings.default_pool is None and not self.crd_served:
            log.warning("no ClusterCIDR API and no --cluster-cidr: nothing can be allocated")
        node_stream = self.api.watch("nodes")
        batch: list[NodeView] = []
        await self._until_synced(node_stream, lambda e: batch.append(project_node(e.object)))
        self._recover(batch)
        self._spawn(self._pump(node_stream, self.on_node_event), "nodes")
        if pool_stream is not None:
            self._spawn(self._pump(pool_stream, self.on_pool_event), "clustercidrs")
        else:
            self._spawn(self._discover(), "discovery")
        self._spawn(self._status_loop(), "status")
        self._spawn(self._send_events(), "events")
        try:
            await self._finalizers_settled()
            await self._allocation_loop()
        finally:
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _finalizers_settled(self) -> None:
        """§6 rules 5-6: missing finalizers are written before the first allocation, so
        pools that exist at start-up serve the Nodes waiting then (bounded wait)."""
        deadline = self.clock.monotonic() + FINALIZER_SETTLE
        while self.finalizing and self.clock.monotonic() < deadline:
            await self.clock.sleep(0.05)

    async def _retry(self, call: Callable[[], Any], what: str) -> Any:
        """§6 rule 2: retry with capped backoff, never exit."""
        delay = self.settings.backoff[0]
        while True:
            try:
                return await call()
            except ApiError as exc:
                log.warning("%s failed: %s; retry in %.1fs", what, exc, delay)
                await self.clock.sleep(delay)
                delay = min(delay * 2, self.settings.backoff[1])

    async def _until_synced(
        self, stream: AsyncIterator[WatchEvent], handle: Callable[[WatchEvent], None]
    ) -> None:
        async for event in stream:
            if event.type == SYNCED:
                return
            handle(event)

    async def _pump(
        self, stream: AsyncIterator[WatchEvent], handle: Callable[[WatchEvent], None]
    ) -> None:
        async for event in stream:
            if event.type != SYNCED:
                handle(event)

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
            if task.get_name() in ("nodes", "clustercidrs", "status", "events", "discovery"):
                self._fatal = exc
                self.wake.set()

    # ------------------------------------------------------------ recovery (§6)

    def _recover(self, views: list[NodeView]) -> None:
        for view in views:
            self._remember(view)
        recorded = self.allocator.recover(views)
        for rec in recorded:
            self._report_recorded(rec, self.nodes[rec.uid], recovery=True)
        managers: dict[str, int] = {}
        for view in views:
            for manager in foreign_managers(view) if view.pod_cidrs else ():
                managers[manager] = managers.get(manager, 0) + 1
        for manager, count in managers.items():
            self.metrics.foreign_nodes.labels(manager).set(count)
        for view in views:
            if view.invalid_pod_cidrs:
                self._once(ev.invalid_pod_cidr(self._node(view), view.invalid_pod_cidrs))
        self.recovered = True
        log.info(
            "recovered %d Nodes (%d with CIDRs) and %d ClusterCIDRs",
            len(views), len(recorded), len(self.pools),
        )  # fmt: skip
        for name in list(self.pools):
            self._plan_finalizer(name)
            self.dirty.add(name)
        self.todo.update(v.uid for v in views if not v.has_cidrs and not v.deleting)
        self.update_gauges()
        self.wake.set()

    def _remember(self, view: NodeView) -> None:
        self.nodes[view.uid] = view
        self.uids[view.name] = view.uid

    def _node(self, view: NodeView) -> ev.Subject:
        return ev.node(view.name, view.uid)

    def _report_recorded(self, rec: Recorded, view: NodeView, *, recovery: bool) -> None:
        subject = self._node(view)
        if rec.conflicts:
            self._once(ev.conflict(subject, rec.conflicts))
            for other in rec.conflicts:
                other_uid = self.uids.get(other, "")
                self._once(ev.conflict(ev.node(other, other_uid), (view.name,)))
        if rec.unowned and rec.changed:
            self._once(ev.not_in_any_pool(subject, rec.unowned))
        if rec.foreign and rec.changed and not recovery:
            managers = foreign_managers(view)
            for manager in managers or ("unknown",):
                self.metrics.foreign.labels(manager).inc()
            log.warning(
                "Node %s got podCIDRs %s from %s: run kube-controller-manager with "
                "--allocate-node-cidrs=false", view.name, list(map(str, view.pod_cidrs)),
                ", ".join(managers) or "another writer", extra=kv(node=view.name, uid=view.uid),
            )  # fmt: skip
            self._emit(ev.other_allocator(subject, managers, view.pod_cidrs))
        for _, owner in rec.owners:
            if owner:
                self.dirty.add(owner)

    # ------------------------------------------------------------ Node events

    def on_node_event(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if event.type == "DELETED":
            self._node_gone(uid)
            return
        view = project_node(event.object)
        old = self.nodes.get(uid)
        self._remember(view)
        if view.invalid_pod_cidrs:
            self._once(ev.invalid_pod_cidr(self._node(view), view.invalid_pod_cidrs))
        if view.pod_cidrs:
            rec = self.allocator.record(view)
            self.todo.discard(uid)
            self._not_waiting(uid)
            if rec.changed:
                self._report_recorded(rec, view, recovery=False)
        elif self._needs_cidrs(view) and (
            old is None or old.labels != view.labels or uid in self.waiting
        ):
            self.todo.add(uid)
            self.wake.set()

    def _needs_cidrs(self, view: NodeView) -> bool:
        return not view.has_cidrs and not view.deleting and view.uid not in self.writing

    def _node_gone(self, uid: str) -> None:
        """§7: release only when the object is gone, by the recorded owner."""
        view = self.nodes.pop(uid, None)
        if view is not None and self.uids.get(view.name) == uid:
            del self.uids[view.name]
        self.todo.discard(uid)
        self._not_waiting(uid)
        self.first_seen.pop(uid, None)
        owners = self.allocator.node_cidrs(uid)
        released = self.allocator.release(uid, self.clock.monotonic())
        if not released:
            return
        for cidr, owner in owners.items():
            if owner:
                self.metrics.releases.labels(str(self._family_net(owner, cidr)), owner).inc()
                self.dirty.add(owner)
                self._plan_finalizer(owner)
        name = view.name if view else uid
        log.info("released %s of deleted Node %s", ",".join(map(str, released)), name,
                 extra=kv(node=name, uid=uid))  # fmt: skip
        self._requeue_waiting()

    def _family_net(self, pool_name: str, cidr: IPNetwork) -> IPNetwork | str:
        pool = self.allocator.pool(pool_name)
        family = pool.family(cidr.version) if pool else None
        return family.network if family else ""

    def _requeue_waiting(self) -> None:
        self.todo.update(self.waiting)
        self.wake.set()

    def _not_waiting(self, uid: str) -> None:
        self.waiting.pop(uid, None)

    # ------------------------------------------------------------ ClusterCIDR events

    def on_pool_event(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        name = str(meta.get("name", ""))
        if event.type == "DELETED":
            self._pool_gone(name)
            return
        cc = project_cluster_cidr(event.object)
        self.pools[name] = cc
        self.pool_status[name] = dict(event.object.get("status") or {})
        self._apply_pool(cc)

    def _apply_pool(self, cc: CC) -> None:
        subject = ev.pool(cc.name, cc.uid)
        generation = str(cc.generation)
        if isinstance(cc, InvalidClusterCIDR):
            self._pool_removed_nodes(cc.name, self.allocator.remove_pool(cc.name))
            self._once(ev.invalid_pool(subject, cc.reason), generation)
        else:
            reason, _ = pool_readiness(cc)
            pool = cc.pool()
            affected = self.allocator.set_pool(pool, ready=reason == "Ready", uid=cc.uid)
            self._pool_removed_nodes(cc.name, affected)
            if cc.frozen:
                self._once(ev.spec_changed(subject), generation)
            if pool.selector is not None and pool.selector.semantics_differ():
                self._once(ev.semantics_differ(subject), generation)
            if reason == "Ready":
                self._requeue_waiting()
        self.dirty.add(cc.name)
        self._plan_finalizer(cc.name)

    def _pool_gone(self, name: str) -> None:
        """§8: dropped at once; CIDRs it still owned stay reserved as unowned."""
        self.pools.pop(name, None)
        self.pool_status.pop(name, None)
        self.dirty.discard(name)
        self.exhausted.pop(name, None)
        self._pool_removed_nodes(name, self.allocator.remove_pool(name))
        self.metrics.remove_pool(name)
        log.info("ClusterCIDR %s is gone", name, extra=kv(clustercidr=name))

    def _pool_removed_nodes(self, pool_name: str, node_names: tuple[str, ...]) -> None:
        for node_name in node_names:
            subject = ev.node(node_name, self.uids.get(node_name, ""))
            self._emit(ev.pool_removed(subject, pool_name))

    # ------------------------------------------------------------ finalizers (§1.6, §8)

    def _plan_finalizer(self, name: str) -> None:
        cc = self.pools.get(name)
        if cc is None or not self.recovered or name in self.finalizing:
            return
        owned = self.allocator.owned_count(name)
        if cc.deleting and owned and isinstance(cc, ClusterCIDR):
            nodes = self.allocator.usage(name)
            count = str(nodes.nodes if nodes else owned)
            self._once(ev.waiting_for_nodes(ev.pool(name, cc.uid), int(count)), count)
        action = plan_finalizer(cc, owned)
        if action is None:
            return
        ops = add_finalizer_patch(cc) if action == "add" else remove_finalizer_patch(cc)
        self.finalizing.add(name)
        self._spawn(self._write_finalizer(name, action, ops), f"finalizer-{name}")

    async def _write_finalizer(self, name: str, action: str, ops: list[Obj]) -> None:
        retry = False
        try:
            await self._fence()
            obj = await self.api.patch_cluster_cidr(name, ops)
        except NotFound:
            return
        except (Conflict, Invalid) as exc:  # someone else changed it: the watch brings it
            log.log(V2, "finalizer %s on %s: %s", action, name, exc, extra=kv(clustercidr=name))
            retry = True
        except ApiError as exc:
            log.warning("finalizer %s on %s failed: %s", action, name, exc,
                        extra=kv(clustercidr=name))  # fmt: skip
            retry = True
        else:
            log.info("finalizer %s on ClusterCIDR %s", "added" if action == "add" else "removed",
                     name, extra=kv(clustercidr=name))  # fmt: skip
            if action == "add" and name in self.pools:
                self.on_pool_event(WatchEvent("MODIFIED", obj))
        finally:
            self.finalizing.discard(name)
        if retry:
            await self.clock.sleep(self.settings.backoff[0])
            self._plan_finalizer(name)

    # ------------------------------------------------------------ allocation (§4, §5, §9)

    async def _allocation_loop(self) -> None:
        while True:
            timeout = self.settings.retry_interval
            expiry = self.allocator.next_expiry()
            if expiry is not None:
                timeout = max(0.0, min(timeout, expiry - self.clock.monotonic()))
            if not await self._woken_within(timeout):
                self._requeue_waiting()  # the safety retry, or a quarantine expiry
            self.wake.clear()
            if self._fatal is not None:
                raise self._fatal
            if self.allocator.expire(self.clock.monotonic()):
                self.todo.update(self.waiting)
            self.allocate_pass()

    async def _woken_within(self, timeout: float) -> bool:
        """Wait for `wake` or `timeout` on the injected clock; True when woken."""
        waker = asyncio.ensure_future(self.wake.wait())
        timer = asyncio.ensure_future(self.clock.sleep(timeout))
        try:
            await asyncio.wait({waker, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waker.cancel()
            timer.cancel()
        return self.wake.is_set()

    def allocate_pass(self) -> None:
        views = [self.nodes[u] for u in self.todo if u in self.nodes and u not in self.writing]
        self.todo.clear()
        for view in allocation_order(views):
            self.first_seen.setdefault(view.uid, self.clock.monotonic())
            result = self.allocator.allocate(view)
            if isinstance(result, Allocation):
                self._not_waiting(view.uid)
                self.writing.add(view.uid)
                self._spawn(self._write_node(view, result), f"write-{view.name}")
            elif isinstance(result, Waiting):
                self._waits(view, result)

    def _waits(self, view: NodeView, waiting: Waiting) -> None:
        self.waiting[view.uid] = waiting.reason
        for pool_name, _ in waiting.exhausted:
            self.dirty.add(pool_name)
        key = (view.uid, waiting.reason)
        now = self.clock.monotonic()
        last = self.not_available_at.get(key)
        if last is None or now - last >= ev.SAME_EVENT_EVERY:
            self.not_available_at[key] = now
            log.info("Node %s waits: %s", view.name, waiting.reason,
                     extra=kv(node=view.name, uid=view.uid))  # fmt: skip
            self._emit(ev.not_available(self._node(view), waiting))

    async def _write_node(self, view: NodeView, alloc: Allocation) -> None:
        try:
            async with self.semaphore:
                await self._write_until_known(view, alloc)
        finally:
            self.writing.discard(view.uid)

    async def _write_until_known(self, view: NodeView, alloc: Allocation) -> None:
        ops = node_patch(alloc.uid, alloc.cidrs)
        failures, delay = 0, self.settings.backoff[0]
        while True:
            await self._fence()
            try:
                obj = await self.api.patch_node(alloc.node, ops)
            except NotFound:
                self._aborted(alloc)
                return
            except (Conflict, Invalid) as exc:
                error: ApiError = exc
            except ApiError as exc:
                error = exc
            else:
                self._committed(alloc, obj)
                return
            self.metrics.patch_failures.labels(str(error.status or "error")).inc()
            failures += 1
            if failures == FAILED_ATTEMPTS_EVENT:
                self._emit(ev.assignment_failed(self._node(view), failures, str(error)))
            if await self._resolve(alloc):
                return
            await self.clock.sleep(delay)
            delay = min(delay * 2, self.settings.backoff[1])

    async def _resolve(self, alloc: Allocation) -> bool:
        """Quorum GET after a failed or unknown write; True when the outcome is settled."""
        delay = self.settings.backoff[0]
        while True:
            try:
                obj = await self.api.get_node(alloc.node)
                break
            except NotFound:
                self._aborted(alloc)
                return True
            except ApiError as exc:  # keep the reservation: the write may have landed
                log.warning("reading Node %s failed: %s", alloc.node, exc,
                            extra=kv(node=alloc.node, uid=alloc.uid))  # fmt: skip
                await self.clock.sleep(delay)
                delay = min(delay * 2, self.settings.backoff[1])
        current = project_node(obj)
        if current.uid != alloc.uid:
            self._aborted(alloc)  # a new Node under the same name arrives through the watch
            return True
        if current.pod_cidrs == alloc.cidrs:
            self._committed(alloc, obj)
            return True
        if current.has_cidrs and not current.pod_cidrs:
            self._aborted(alloc)  # unparsable podCIDRs: never patched (§5.6)
            return True
        if current.has_cidrs:
            self._remember(current)
            rec = self.allocator.record(current)  # theirs replace ours (§10)
            self._report_recorded(rec, current, recovery=False)
            self._requeue_waiting()
            return True
        return False

    def _aborted(self, alloc: Allocation) -> None:
        if self.allocator.abort(alloc.uid):
            self._requeue_waiting()

    def _committed(self, alloc: Allocation, obj: Obj) -> None:
        self.allocator.commit(alloc.uid)
        view = project_node(obj)
        if view.uid == alloc.uid and alloc.uid in self.nodes:
            self._remember(view)
        for cidr in alloc.cidrs:
            self.metrics.allocations.labels(
                str(self._family_net(alloc.pool, cidr)), alloc.pool
            ).inc()
        self.metrics.tries.observe(alloc.tries)
        started = self.first_seen.pop(alloc.uid, None)
        if started is not None:
            self.metrics.latency.observe(self.clock.monotonic() - started)
        self.dirty.add(alloc.pool)
        texts = ",".join(map(str, alloc.cidrs))
        log.info("assigned %s from %s to Node %s", texts, alloc.pool, alloc.node,
                 extra=kv(node=alloc.node, uid=alloc.uid, clustercidr=alloc.pool))  # fmt: skip
        self._emit(ev.assigned(ev.node(alloc.node, alloc.uid), alloc.pool, alloc.cidrs))

    async def _fence(self) -> None:
        """No write starts late in a renewal window (lifecycle.md §7.7)."""
        while not self.may_write():
            await self.clock.sleep(0.1)

    # ------------------------------------------------------------ status, gauges (§1.4)

    async def _status_loop(self) -> None:
        while True:
            await self.clock.sleep(min(1.0, self.settings.status_interval))
            self.update_gauges()
            now = self.clock.monotonic()
            for name in sorted(self.dirty):
                if now - self.status_at.get(name, float("-inf")) >= self.settings.status_interval:
                    self.dirty.discard(name)
                    await self._write_status(name)

    async def _write_status(self, name: str) -> None:
        cc = self.pools.get(name)
        if cc is None:
            return
        usage = self.allocator.usage(name) if isinstance(cc, ClusterCIDR) else None
        if usage is not None and isinstance(cc, ClusterCIDR):
            self.metrics.set_pool(name, usage)
            self._note_exhaustion(cc, usage)
        desired = desired_status(cc, usage)
        current = self.pool_status.get(name)
        if not status_differs(desired, current):
            return
        stamped = with_transition_times(desired, current, ev_time(self.clock))
        self.status_at[name] = self.clock.monotonic()
        try:
            await self._fence()
            obj = await self.api.patch_cluster_cidr_status(name, stamped)
        except ApiError as exc:
            log.log(V2, "status of %s: %s", name, exc, extra=kv(clustercidr=name))
            if not isinstance(exc, NotFound):
                self.dirty.add(name)
            return
        if name in self.pools:
            self.pool_status[name] = dict(obj.get("status") or {})

    def _note_exhaustion(self, cc: ClusterCIDR, usage: PoolUsage) -> None:
        full = usage.exhausted_versions
        if full and not self.exhausted.get(cc.name) and pool_readiness(cc)[0] == "Ready":
            log.info("ClusterCIDR %s is exhausted", cc.name, extra=kv(clustercidr=cc.name))
            self._emit(ev.exhausted(ev.pool(cc.name, cc.uid), full))
        self.exhausted[cc.name] = full

    def update_gauges(self) -> None:
        states = {"ready": 0, "invalid": 0, "frozen": 0, "terminating": 0}
        key = {"Invalid": "invalid", "SpecChanged": "frozen", "Terminating": "terminating"}
        for cc in self.pools.values():
            states[key.get(pool_readiness(cc)[0], "ready")] += 1
        for state, count in states.items():
            self.metrics.pools.labels(state).set(count)
        reasons = {"no_matching_clustercidr": 0, "exhausted": 0, "write_pending": len(self.writing)}
        for why in self.waiting.values():
            reasons["exhausted" if why == "Exhausted" else "no_matching_clustercidr"] += 1
        for label, count in reasons.items():
            self.metrics.waiting.labels(label).set(count)
        self.metrics.unowned.set(self.allocator.unowned_count())
        self.metrics.conflicts.set(self.allocator.conflict_count())
        default = self.settings.default_pool
        if default is not None:
            usage = self.allocator.usage(default.name)
            if usage is not None:
                self.metrics.set_pool(default.name, usage)

    # ------------------------------------------------------------ discovery (§11 rule 4)

    async def _discover(self) -> None:
        while not self.crd_served:
            await self.clock.sleep(self.settings.discovery_interval)
            try:
                self.crd_served = await self.api.cluster_cidrs_served()
            except ApiError as exc:
                log.warning("discovery failed: %s", exc)
        log.info("the ClusterCIDR API is served now; watching ClusterCIDRs")
        await self._pump(self.api.watch("clustercidrs"), self.on_pool_event)

    # ------------------------------------------------------------ Events (§15.1)

    def _once(self, spec: ev.EventSpec, *key: str) -> None:
        """Emit once per subject, reason and `key` (e.g. the generation)."""
        marker = (spec.subject.kind, spec.subject.uid or spec.subject.name, spec.reason, *key)
        if marker not in self.noted:
            self.noted.add(marker)
            self._emit(spec)

    def _emit(self, spec: ev.EventSpec) -> None:
        try:
            self.events.put_nowait(spec)
        except asyncio.QueueFull:
            self.metrics.events_dropped.inc()

    async def _send_events(self) -> None:
        while True:
            spec = await self.events.get()
            body = ev.event_body(
                spec,
                namespace=self.settings.event_namespace,
                now=self.clock.now(),
                instance=self.settings.instance,
            )
            try:
                await self.api.create_event(self.settings.event_namespace, body)
            except ApiError as exc:
                self.metrics.events_dropped.inc()
                log.log(V2, "event %s dropped: %s", spec.reason, exc)


def ev_time(clock: Clock) -> str:
    return clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")

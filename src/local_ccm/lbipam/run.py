"""service-lb-ipam as a controller of the kit (`runtime.controller`): what the leader decides;
`runtime.worker.Worker` runs it.

It watches Nodes, Namespaces, pools, the kube-vip ConfigMap and Services, and once all are
listed rebuilds the ledger from the Services' status (`build_ledger`, oldest first), never
from memory. Watches map changes to Service keys; `Settings.workers` workers sync different
Services side by side and write with JSON Patches guarded by resourceVersion, but the address
decisions are taken one at a time, in the queue's order (`runtime.turns`), each reserved in
the ledger before the next is taken and before its status write (with the Service's current
addresses, until the write lands), so no failure, retry or write in flight can hand one
address to two Services. An address is released only after the Service is gone (its DELETED
event), after its status is cleared (a type change), or once a Service whose decision is a
problem no longer shows it (`_let_go_unshown`); a Service being deleted that another
finalizer keeps still holds what it shows. No finalizer is added, so deleting thousands of
Services at once costs the apiserver no write of ours; the finalizer earlier releases added is
removed where found (an upgrade), which touches no ledger. Pool status is
written apart (a loop beside the syncs, each pool's write behind the same write fence), at most
once per `Settings.status_every`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import Any

from local_ccm.clock import Clock
from local_ccm.kube.errors import ApiError, Conflict, Forbidden, NotFound, Transient, Unauthorized
from local_ccm.kube.informer import Change, ErrorKinds, Informer, ListWatch
from local_ccm.lbipam.api import CONFIGMAPS, NAMESPACES, POOLS, SERVICES, LbApi, Obj
from local_ccm.lbipam.core import writes
from local_ccm.lbipam.core.allocator import (
    OUTSIDE_POOLS,
    Allocation,
    Decision,
    build_ledger,
    decide,
    hold,
    release,
    usage,
)
from local_ccm.lbipam.core.kubevip import KubeVipPools
from local_ccm.lbipam.core.ledger import Holder, Ledger
from local_ccm.lbipam.core.model import (
    PoolEntry,
    created,
    project_kubevip,
    project_labels,
    project_node,
    project_pool,
    project_service,
    service_subject,
)
from local_ccm.lbipam.core.pools import Pool
from local_ccm.lbipam.core.service import (
    KUBEVIP_ANNOTATION,
    ServiceRequest,
    current_addresses,
    parse_service,
)
from local_ccm.lbipam.core.status import (
    InUse,
    NodeNetworks,
    conflicts,
    desired_status,
    status_update,
)
from local_ccm.lbipam.metrics import LbMetrics
from local_ccm.lbipam.options import NAME, Settings
from local_ccm.runtime import events as ev
from local_ccm.runtime.controller import DONE, Done, Fence, Permission, Result, Watch
from local_ccm.runtime.parts import Informers, LastWrites, event_outbox, stamp
from local_ccm.runtime.turns import Turn, Turns

log = logging.getLogger(__name__)
# A pool list answers 404 while the CRD is not installed: wait for it like for a restart.
POOL_ERRORS = ErrorKinds(retried=(Transient, Forbidden, Unauthorized, NotFound))


def permissions(settings: Settings) -> tuple[Permission, ...]:
    """The RBAC the allocator needs (the chart's ClusterRole for it, the kube-vip ConfigMap
    its Role, the Node watch the lifecycle controller's), nothing more."""
    found = [
        Permission(SERVICES.group, SERVICES.plural, ("list", "watch", "patch")),
        Permission(SERVICES.group, f"{SERVICES.plural}/status", ("patch",)),
        Permission(POOLS.group, POOLS.plural, ("list", "watch")),
        Permission(POOLS.group, f"{POOLS.plural}/status", ("patch",)),
        Permission(NAMESPACES.group, NAMESPACES.plural, ("list", "watch")),
        Permission("", "nodes", ("list", "watch")),
        Permission("", "events", ("create",)),  # about a Service: in its own namespace
    ]
    if settings.kubevip:
        namespace, name = settings.kubevip
        found.append(Permission(CONFIGMAPS.group, CONFIGMAPS.plural, ("list", "watch"),
                                names=(name,), namespace=namespace))  # fmt: skip
    return tuple(found)


def _pools_of(entry: PoolEntry | KubeVipPools) -> object:
    return entry.parsed if isinstance(entry, PoolEntry) else entry.pools


class Controller:
    """The leader's state and decisions for one term (`runtime.controller.Controller`); several
    workers, but a decision reads the ledger the previous one left (`turns`)."""

    name = NAME

    def __init__(
        self,
        api: LbApi,
        nodes: ListWatch,
        settings: Settings = Settings(),  # noqa: B008 (frozen)
        *,
        metrics: LbMetrics,
        clock: Clock,
        rng: random.Random | None = None,
    ) -> None:
        self.api, self.settings, self.metrics, self.clock = api, settings, metrics, clock
        self.permissions = permissions(settings)
        self.ledger: Ledger | None = None
        self.turns = Turns()  # the address decisions, one at a time in the queue's order
        self.first_seen: dict[str, float] = {}
        # Services whose last decision was a problem, or left a PreferDualStack one a family short
        self.waiting: set[str] = set()
        self.written = LastWrites()  # see _fresh
        # Services whose last status write got no answer (it may have landed or not), by the
        # resourceVersion that write was guarded by: until the Service shows another version,
        # its cached copy may predate what that write shows (see _let_go_unshown).
        self.unsettled: dict[str, str] = {}
        self.pools_dirty = asyncio.Event()
        self.node_changes = 0  # Node networks changed: the pools' conflicts are looked at again
        self.overlaps: dict[str, tuple[object, list[str]]] = {}  # pool -> (basis, conflicts)
        self.in_use: tuple[int, InUse] | None = None  # (node_changes, what new addresses skip)
        self.outbox = event_outbox(api, clock, NAME, instance=settings.instance,
                                   namespace=settings.event_namespace)  # fmt: skip
        informer = Informers(clock, rng, metrics.watch_ended).make
        self.nodes = informer(nodes, project_node, "nodes")
        self.namespaces = informer(api.list_watch("namespaces"), project_labels, "namespaces")
        self.pool_objects = informer(api.list_watch("pools"), project_pool, "pools", POOL_ERRORS)
        self.services = informer(api.list_watch("services"), project_service, "services")
        self.kubevip = (informer(api.list_watch("kubevip"), project_kubevip, "kubevip")
                        if settings.kubevip else None)  # fmt: skip

    def watches(self) -> Sequence[Watch]:
        found = [Watch(self.nodes, self._on_node), Watch(self.namespaces, self._on_namespace),
                 Watch(self.pool_objects, self._on_pools)]  # fmt: skip
        if self.kubevip is not None:
            found.append(Watch(self.kubevip, self._on_pools))
        return [*found, Watch(self.services, self._on_service)]

    def synced(self) -> Iterable[str]:
        return self._rebuild()

    def beside(self, fence: Fence) -> Sequence[Coroutine[Any, Any, None]]:
        return [self.outbox.run(), self._pool_status_loop(fence)]

    def subject(self, key: str) -> ev.Subject | None:
        obj = self.services.cache.get(key)
        return None if obj is None else service_subject(obj)

    def emit(self, spec: ev.EventSpec, subject: ev.Subject) -> None:
        self.outbox.once(spec, subject, spec.message)

    def _informers(self) -> list[Informer[Any]]:
        found: list[Informer[Any] | None] = [self.nodes, self.namespaces, self.pool_objects,
                                             self.kubevip, self.services]  # fmt: skip
        return [i for i in found if i is not None]

    def ready(self) -> tuple[bool, str]:
        waiting = [i.name for i in self._informers() if not i.has_synced()]
        if waiting:
            return False, "caches not synced: " + ", ".join(waiting)
        return (True, "ok") if self.ledger is not None else (False, "rebuilding allocations")

    # ------------------------------------------------------------ pools

    def pools(self) -> list[Pool]:
        """Every usable pool: the valid `LoadBalancerIPPool`s and the kube-vip ConfigMap's."""
        found = [e.parsed for e in self.pool_objects.cache.values()
                 if isinstance(e.parsed, Pool)]  # fmt: skip
        for parsed in self.kubevip.cache.values() if self.kubevip is not None else ():
            found += parsed.pools
        return found

    # ------------------------------------------------------------ watches: the keys

    def _of_our_class(self, obj: Mapping[str, Any]) -> bool:
        """Of our class (a pool change concerns these; a former LoadBalancer Service of ours
        that still shows our condition, `writes.shows_ours`, is cleaned up on its own events)."""
        s = self.settings
        return writes.class_matches(obj, s.lb_class, classless=s.classless)

    def all_keys(self, namespace: str | None = None) -> list[str]:
        """Every Service of our class (in `namespace`)."""
        prefix = "" if namespace is None else namespace + "/"
        return [key for key, obj in self.services.cache.items()
                if key.startswith(prefix) and self._of_our_class(obj)]  # fmt: skip

    def _on_service(self, change: Change[Obj]) -> Iterable[str]:
        return [change.key] if change.type in ("ADDED", "MODIFIED", "DELETED") else []

    def _on_pools(self, change: Change[Any]) -> Iterable[str]:
        if change.type in ("SYNCED", "BOOKMARK"):
            return []
        old, new = change.old, change.new
        problems = new.problems if isinstance(new, KubeVipPools) else ()
        if problems and problems != getattr(old, "problems", ()):
            log.warning("kube-vip ConfigMap: %s", "; ".join(problems))
        self.pools_dirty.set()
        if old is None or new is None or _pools_of(old) != _pools_of(new):
            return self.all_keys()  # status or an unchanged relist: decisions stay as they are
        return []

    def _on_namespace(self, change: Change[Mapping[str, str]]) -> Iterable[str]:
        if change.type in ("ADDED", "MODIFIED") and change.old != change.new:
            return self.all_keys(change.key)
        return []

    def _on_node(self, change: Change[NodeNetworks]) -> Iterable[str]:
        if change.type in ("ADDED", "MODIFIED", "DELETED") and change.old != change.new:
            self.node_changes += 1
            self.pools_dirty.set()
            return sorted(self.waiting, key=self._age)  # an address a Node left may serve one
        return []

    # ------------------------------------------------------------ start

    def _rebuild(self) -> list[str]:
        """The ledger from every Service of our class that holds or may hold addresses."""
        held = sorted(
            (obj for obj in self.services.cache.values()
             if writes.may_hold(obj, self.settings.lb_class, classless=self.settings.classless)),
            key=created,
        )  # fmt: skip
        requests = [self._parse(o) for o in held]
        self.ledger, notes = build_ledger(requests, self.pools(), self.namespaces.cache)
        for note in notes:
            log.warning("address claimed twice at start, the older Service keeps it: %s", note)
        log.info("allocations rebuilt from %d Services", len(held))
        self.pools_dirty.set()
        return self.all_keys()

    # ------------------------------------------------------------ one Service

    async def sync(self, key: str) -> Result:
        """Decide one Service and write; a conflict or another API error is the worker's to
        retry (a conflict at once: the Service changed meanwhile). Syncs of different Services
        run side by side (`Settings.workers`): what touches the ledger is synchronous, between
        two awaits, and the address decisions take their turn in the queue's order."""
        obj = self._fresh(key)
        s = self.settings
        what = writes.step(obj, s.lb_class, classless=s.classless)
        woken: list[str] = []  # Services a release may serve, oldest first
        try:
            if what == "forget" and (obj is None or not writes.deleting(obj)):
                woken = self._release(key, () if obj is None else current_addresses(obj))
            elif what == "cleanup" and obj is not None:
                woken = await self._cleanup(key, obj)
            elif what == "allocate" and obj is not None:
                woken = await self._allocate(key, obj, self.turns.take())  # turn before any await
        except NotFound:
            return DONE  # deleted meanwhile: its DELETED event comes
        except Conflict:
            raise
        except ApiError as exc:
            self.metrics.write_failures.labels("services", str(exc.status or "error")).inc()
            raise
        return Done(others=tuple(woken))

    def _fresh(self, key: str) -> Obj | None:
        """The cached Service, or what this controller's last write returned while the cache
        still shows a version that write replaced (`LastWrites`)."""
        return self.written.fresh(key, self.services.cache.get(key))

    async def _patch(self, key: str, base: Obj, patch: list[Obj], *, status: bool = False) -> Obj:
        namespace, name = key.split("/", 1)
        call = self.api.patch_service_status if status else self.api.patch_service
        answer = await call(namespace, name, patch)
        if not answer:
            return base
        answer = project_service(answer)  # kept like the cache's copies
        self.written.wrote(key, base, answer)
        return answer

    def _age(self, key: str) -> tuple[str, int, str, str]:
        obj = self.services.cache.get(key)
        return created(obj) if obj is not None else ("", 0, "", key)

    def _release(self, key: str, shown: Iterable[Any] = ()) -> list[str]:
        """Forget what `key` holds (it is gone, or no longer ours), but the addresses it still
        `shown`s; returns the Services the freed addresses may serve, oldest first."""
        self.first_seen.pop(key, None)
        self.waiting.discard(key)
        self.unsettled.pop(key, None)
        return self._free(key, shown, "addresses released")

    def _free(self, key: str, shown: Iterable[Any], what: str) -> list[str]:
        """Forget what `key` holds but the addresses it `shown`s; the Services the freed
        addresses may serve, oldest first."""
        assert self.ledger is not None
        if not release(self.ledger, key, frozenset(shown)):
            return []
        self.metrics.releases.inc()
        self.pools_dirty.set()
        log.info("svc=%s: %s", key, what)
        return sorted(self.waiting - {key}, key=self._age)

    async def _cleanup(self, key: str, obj: Obj) -> list[str]:
        """A Service no longer a LoadBalancer of ours: status cleared and addresses released,
        kube-vip's annotation and the finalizer of earlier releases removed. A Service being
        deleted only loses that finalizer: its addresses are released when it is gone (its
        DELETED event: `sync` with no object), never here, since until the apiserver has
        removed it, it still exists and may still show them. Returns the Services a release
        may serve."""
        assert self.ledger is not None
        deleting = writes.deleting(obj)
        if not deleting:
            patch = writes.status_patch(obj, [], writes.condition(None, writes.generation(obj),
                                                              stamp(self.clock)))  # fmt: skip
            if patch is not None:
                obj = await self._patch(key, obj, patch, status=True)
            held = ", ".join(str(a) for a in self.ledger.held_by(key))
            if held:  # what `kubectl describe` shows of the release, as the cloud controller does
                message = f"released {held}: no longer a LoadBalancer this controller serves"
                self.outbox.emit(ev.EventSpec("Normal", "AddressReleased", message),
                                 service_subject(obj))  # fmt: skip
        patch = writes.finalizer_patch(obj) or []
        if not deleting and self.settings.kubevip_annotation:
            annotation = writes.annotation_patch(obj, KUBEVIP_ANNOTATION, None) or []
            patch = [*patch, *annotation[1:]] if patch else annotation  # one guard for both
        if patch:
            await self._patch(key, obj, patch)
            log.info("svc=%s: cleaned up", key)
        return [] if deleting else self._release(key)

    async def _allocate(self, key: str, obj: Obj, turn: Turn) -> list[str]:
        """In `turn`, the decision (reserved at once), then its status write, which other
        decisions do not wait for; the finalizer of earlier releases, where found, is removed
        first (once per Service, after an upgrade). Returns the Services addresses freed by a
        problem decision may serve."""
        assert self.ledger is not None
        with turn:
            patch = writes.finalizer_patch(obj)
            if patch is not None:
                obj = await self._patch(key, obj, patch)
                log.info("svc=%s: finalizer of an earlier release removed", key)
            await turn.wait()
            before = self.ledger.entries(key)
            decision, woken = self._decide(key, obj)
        entries = writes.ingress(decision.addresses) if isinstance(decision, Allocation) else None
        cond = writes.condition(decision, writes.generation(obj), stamp(self.clock))
        patch = writes.status_patch(obj, entries, cond)
        if patch is not None:
            try:
                written = await self._patch(key, obj, patch, status=True)
            except ApiError as exc:
                if 400 <= exc.status < 500:
                    # Refused: the write certainly did not land, so the addresses this decision
                    # reserved go back; the retry decides again (the same address, while free).
                    self.ledger.restore(key, before)
                    self.pools_dirty.set()
                else:  # no answer: it may land yet
                    self.unsettled[key] = writes.version(obj)
                raise
            self.unsettled.pop(key, None)
            self._written(key, obj, decision, entries, str(cond["message"]))
            obj = written
        if isinstance(decision, Allocation):
            hold(self.ledger, decision)
            self.pools_dirty.set()
            if self.settings.kubevip_annotation:
                await self._annotate(key, obj, decision)
        return woken

    def _decide(self, key: str, obj: Obj) -> tuple[Decision, list[str]]:
        """One decision and its reservation, with no await between them: a decision taken
        meanwhile by another sync sees this one's addresses held. With it, the Services that
        addresses a problem decision let go of may serve."""
        assert self.ledger is not None
        request = self._parse(obj)
        labels = self.namespaces.cache.get(key.split("/", 1)[0]) or {}
        decision = decide(request, self.pools(), self.ledger, labels, self._in_use())
        woken: list[str] = []
        if isinstance(decision, Allocation):
            if decision.wanting:
                self.waiting.add(key)  # a release may bring the family it lacks
            else:
                self.waiting.discard(key)
            self._reserve(request.key, decision, request.current, request.ports)
        else:
            self.waiting.add(key)  # a problem takes away nothing the Service shows
            woken = self._let_go_unshown(key, obj, request.current)
        if not request.current:
            self.first_seen.setdefault(key, self.clock.monotonic())
        return decision, woken

    def _let_go_unshown(self, key: str, obj: Obj, shown: tuple[Any, ...]) -> list[str]:
        """What the ledger holds for a Service beyond what it shows (its status was cleared,
        or a write that did not land), freed; not while a write of ours whose outcome is
        unknown may still show it (the Service is at the version that write was guarded by).
        Returns the Services the freed addresses may serve, oldest first."""
        if self.unsettled.get(key) == writes.version(obj):
            return []
        self.unsettled.pop(key, None)
        return self._free(key, shown, "addresses it no longer shows released")

    def _parse(self, obj: Obj) -> ServiceRequest:
        return parse_service(obj, kubevip_written=self.settings.kubevip_annotation)

    def _in_use(self) -> InUse:
        """The Service CIDRs' and the Nodes' addresses and podCIDRs, made again only when a
        Node's networks changed (a thousand Nodes' texts take ~40 ms to parse)."""
        if self.in_use is None or self.in_use[0] != self.node_changes:
            nodes = list(self.nodes.cache.values())
            self.in_use = self.node_changes, InUse.of(self.settings.service_cidrs, nodes)
        return self.in_use[1]

    async def _annotate(self, key: str, obj: Obj, allocation: Allocation) -> None:
        """kube-vip's annotation names the addresses, after the status (the source of truth)."""
        text = ",".join(str(a) for a in allocation.addresses)
        patch = writes.annotation_patch(obj, KUBEVIP_ANNOTATION, text)
        if patch is not None:
            await self._patch(key, obj, patch)

    def _reserve(
        self, key: str, allocation: Allocation, current: tuple[Any, ...], ports: frozenset[Any]
    ) -> None:
        """Hold the new addresses and, until the write lands, the ones the Service may show:
        its current ones and those the ledger holds for it (the cached copy can predate a
        status write that landed; deciding on it must not free what that write shows)."""
        assert self.ledger is not None
        placed = [(p.address, p.holder) for p in allocation.placements]
        shown = dict.fromkeys((*current, *self.ledger.held_by(key)))
        keep = [(a, Holder(key, None, ports)) for a in shown if a not in allocation.addresses]
        self.ledger.hold(placed + keep)

    def _written(
        self, key: str, obj: Obj, decision: Decision, entries: list[Obj] | None, message: str
    ) -> None:
        subject = service_subject(obj)
        if isinstance(decision, Allocation):
            result = OUTSIDE_POOLS if decision.outside else "allocated"
            self.metrics.allocations.labels(result).inc()
            if decision.outside:  # kept, but the operator should know: see docs/loadbalancer.md
                log.warning("svc=%s: %s", key, message)
                self.outbox.emit(ev.EventSpec("Warning", OUTSIDE_POOLS, message), subject)
            if entries is not None and writes.current_ips(obj) != [e["ip"] for e in entries]:
                started = self.first_seen.pop(key, None)
                if started is not None:
                    self.metrics.allocation_latency.observe(self.clock.monotonic() - started)
                log.info("svc=%s: %s", key, message)
                # the condition's message: with the notes (an address left, a family lacking)
                self.outbox.emit(ev.EventSpec("Normal", "AddressAllocated", message), subject)
            return
        self.metrics.allocations.labels(decision.reason).inc()
        log.info("svc=%s: no address: %s: %s", key, decision.reason, decision.message)
        self.outbox.emit(ev.EventSpec("Warning", decision.reason, decision.message), subject)

    # ------------------------------------------------------------ pool status

    async def _pool_status_loop(self, fence: Fence) -> None:
        while True:
            await self.pools_dirty.wait()
            self.pools_dirty.clear()
            await self._write_pool_statuses(fence)
            await self.clock.sleep(self.settings.status_every)

    async def _write_pool_statuses(self, fence: Fence) -> None:
        """Every pool's usage metrics, and its status where it changed: each write awaits the
        fence first (the Lease may age while the writes before it go out)."""
        assert self.ledger is not None
        usable = self.pools()
        self.metrics.pool_addresses.clear()  # a deleted pool's series go with it
        for pool in usable:
            used = usage(pool, self.ledger)
            for version in pool.families:
                family, taken = f"IPv{version}", used.get(version, 0)
                self.metrics.pool_addresses.labels(pool.name, family, "used").set(taken)
                free = pool.capacity(version) - taken
                self.metrics.pool_addresses.labels(pool.name, family, "free").set(free)
        self.overlaps = {n: o for n, o in self.overlaps.items() if n in self.pool_objects.cache}
        for name, entry in list(self.pool_objects.cache.items()):
            parsed = entry.parsed
            if isinstance(parsed, Pool):
                found = self._conflicts(parsed, usable)
                desired = desired_status(parsed, usage(parsed, self.ledger), found)
            else:
                desired = desired_status(parsed, {}, [])
            wanted = status_update(entry.status, desired, stamp(self.clock))
            if wanted is not None:
                await self._write_pool(name, entry, wanted, fence)

    def _conflicts(self, pool: Pool, usable: list[Pool]) -> list[str]:
        """The pool's overlaps, looked at again only when a pool or a Node's networks changed:
        with a thousand Nodes that is ~40 ms of parsing their texts, and every address taken or
        freed asks for the pool's status (its counts) again."""
        basis = (pool, usable, self.node_changes)
        kept = self.overlaps.get(pool.name)
        if kept is None or kept[0] != basis:
            nodes = list(self.nodes.cache.values())
            kept = basis, conflicts(pool, usable, self.settings.service_cidrs, nodes)
            self.overlaps[pool.name] = kept
        return kept[1]

    async def _write_pool(self, name: str, entry: PoolEntry, status: Obj, fence: Fence) -> None:
        try:
            await fence()
            await self.api.write_pool_status(name, status)
        except ApiError as exc:
            self.metrics.write_failures.labels(POOLS.plural, str(exc.status or "error")).inc()
            log.warning("pool=%s: status write failed: %s", name, exc)
            self.pools_dirty.set()
            return
        subject = ev.Subject(POOLS.kind, name, entry.uid, POOLS.api_version)
        for item in status.get("conditions") or ():
            bad = (item["type"], item["status"]) in (("Ready", "False"), ("Conflict", "True"))
            if bad and item["reason"] != "Disabled":
                spec = ev.EventSpec("Warning", f"Pool{item['reason']}", item["message"])
                self.outbox.once(spec, subject, item["message"])

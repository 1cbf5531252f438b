"""The Lease loop of the L2 announcement: a controller of the kit (`runtime.controller`) in the
agent, which drives the speaker.

It watches the pools, Services, EndpointSlices, Nodes, Namespaces and the Leases of its
namespace, and this Node's interfaces (`links`). Keys: ``*`` (the inputs changed: the targets
are computed again and every address looked at, targets and address Leases in the cache
alike), an address (its Lease decided: `hold.decide` with this Node's `choice.place`, then at
most one write, compare-and-swap; for an address no longer announced, `cleanup.sweep`: at most
one DELETE at the record's uid and resourceVersion), and ``service/<namespace>/<name>`` (the
announcer annotation of a Service). The speaker serves, per interface, the addresses this agent
holds, and its fence is `hold.answering` of the address's state at the moment it asks. A failed
write changes no state: the next read decides; a conflict reads the Lease again at once.

Which Nodes "announce" (the fourth condition of `choice.eligible`): every Node the other
conditions admit. A Node that runs no announcing agent costs the candidates ranked behind it
one ``rank_step`` each, never safety (docs/l2-announcement.md).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

from local_ccm import names
from local_ccm.announce.api import ENDPOINT_SLICES, NAMESPACES, POOLS, SERVICES, AnnounceApi, Obj
from local_ccm.announce.core import choice, cleanup, hold
from local_ccm.announce.core.interfaces import desired_interfaces
from local_ccm.announce.core.targets import (
    Target,
    desired_targets,
    ingress_addresses,
    selected_nodes,
)
from local_ccm.announce.links import InterfaceSource
from local_ccm.announce.metrics import AnnounceMetrics
from local_ccm.announce.speaker import Counters
from local_ccm.clock import Clock
from local_ccm.kube.errors import ApiError, Conflict, NotFound, Transient
from local_ccm.kube.informer import Change, ErrorKinds, Informer
from local_ccm.kube.resources import LEASES
from local_ccm.lbpools import POOL_ANNOTATIONS, InvalidPool, Pool, parse_pool
from local_ccm.lease.election import (
    lease_for_create,
    lease_for_update,
    record_from_lease,
    release_record,
)
from local_ccm.logs import kv
from local_ccm.records import dataclass
from local_ccm.runtime import controller as rc
from local_ccm.runtime import events as ev
from local_ccm.runtime.outbox import EventOutbox
from local_ccm.runtime.parts import OUTBOX_CAPACITY, version
from local_ccm.runtime.promtext import Registry

log = logging.getLogger(__name__)
NAME: Final = "l2-announce"
ALL: Final = "*"
SERVICE_KEY: Final = "service/"
ANNOUNCING: Final = "L2Announcing"  # the Event reason on a Service when a Node takes over
DEFAULT_CLASS: Final = "lb.local-ccm.io/pools"  # service-lb-ipam's default --lb-class
# A pool list answers 404 while the CRD is not installed: wait for it like for a restart.
POOL_ERRORS = ErrorKinds(retried=(Transient, NotFound, *ErrorKinds().retried))
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
NodeEntry = tuple[choice.NodeView, Mapping[str, str]]


@dataclass(frozen=True)
class Settings:
    """What the agent's flags say; every agent must use the same `timings`."""

    node: str
    lease_namespace: str = "kube-system"
    lb_class: str = DEFAULT_CLASS
    classless: bool = True
    timings: hold.Timings = hold.Timings()
    backoff: tuple[float, float] = (0.5, 4.0)  # a failed write's first and longest retry delay


def permissions(settings: Settings) -> list[rc.Permission]:
    """What the announcing agent needs beyond the agent's own RBAC."""
    return [
        rc.Permission(
            LEASES.group,
            LEASES.plural,
            ("get", "list", "watch", "create", "update", "delete"),
            namespace=settings.lease_namespace,
        ),
        rc.Permission(SERVICES.group, SERVICES.plural, ("list", "watch", "patch")),
        rc.Permission(ENDPOINT_SLICES.group, ENDPOINT_SLICES.plural, ("list", "watch")),
        rc.Permission(POOLS.group, POOLS.plural, ("list", "watch")),
        rc.Permission(NAMESPACES.group, NAMESPACES.plural, ("list", "watch")),
        rc.Permission("", "nodes", ("list", "watch")),
        rc.Permission("", "events", ("create",)),  # about a Service: in its own namespace
    ]


def announcer_annotation(address: IPAddress) -> str:
    """The Service annotation naming the Node that announces `address`:
    ``local-ccm.io/l2-192.0.2.10: node-a`` (the Lease's name after the prefix)."""
    return names.ANNOTATION_PREFIX + hold.lease_name(address)


def lease_address(name: str) -> IPAddress | None:
    """The address of an address Lease's name (`hold.lease_name`'s inverse), None for any
    other Lease."""
    if not name.startswith(hold.LEASE_PREFIX):
        return None
    text = name.removeprefix(hold.LEASE_PREFIX)
    try:
        return ipaddress.ip_address(text.replace("-", ":") if "-" in text else text)
    except ValueError:
        return None


class Speaking(Protocol):
    """What the loop asks of the speaker (`speaker.Speaker`)."""

    def set_addresses(self, interface: str, addresses: Iterable[IPAddress]) -> None: ...
    def announce(self, address: IPAddress) -> bool: ...
    async def run(self) -> None: ...

    @property
    def counters(self) -> Counters: ...


# ---------------------------------------------------------------- projections


def project_service(obj: Obj) -> Obj:
    """What `desired_targets` and the annotation read of a Service."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k.startswith(names.ANNOTATION_PREFIX + hold.LEASE_PREFIX)
                   or k in POOL_ANNOTATIONS}  # fmt: skip
    return {
        "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "labels")}
        | {"annotations": annotations, "annotated": bool(meta.get("annotations"))},
        "spec": {k: spec.get(k) for k in ("type", "loadBalancerClass", "externalTrafficPolicy")},
        "status": obj.get("status") or {},
    }


def project_slice(obj: Obj) -> tuple[str, frozenset[str]]:
    """The Service an EndpointSlice belongs to ("namespace/name") and its ready Nodes."""
    meta = obj.get("metadata") or {}
    service = (meta.get("labels") or {}).get("kubernetes.io/service-name", "")
    key = f"{meta.get('namespace', '')}/{service}" if service else ""
    return key, choice.endpoint_nodes([obj])


def project_node(obj: Obj) -> NodeEntry:
    return choice.project_node(obj), dict((obj.get("metadata") or {}).get("labels") or {})


def project_labels(obj: Obj) -> Mapping[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def project_lease(obj: Obj) -> Obj | None:
    """An address Lease without its managed fields; None for the namespace's other Leases."""
    meta = obj.get("metadata") or {}
    if lease_address(str(meta.get("name", ""))) is None:
        return None
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


class Newest:
    """The copy of each Lease to decide on: what this agent's last write (or re-read after a
    conflict) returned, while the cache still shows the version that write was based on; then
    the cache's. Deciding on an older copy would look like a loss (safe, but the agent would
    stop answering until it renewed again)."""

    def __init__(self) -> None:
        self._mine: dict[str, tuple[frozenset[str], Obj | None]] = {}

    def pick(self, name: str, cached: Obj | None) -> Obj | None:
        mine = self._mine.get(name)
        if mine is not None and _version(cached) in mine[0]:
            return mine[1]
        self._mine.pop(name, None)
        return cached

    def saw(self, name: str, base: Obj | None, answer: Obj | None) -> None:
        replaced = self._mine.get(name, (frozenset[str](), None))[0] | {_version(base)}
        self._mine[name] = (replaced, answer)


def _version(obj: Obj | None) -> str:
    return "" if obj is None else version(obj)


# ---------------------------------------------------------------- the controller


class Announcer:
    """The Lease loop for one Node (`runtime.controller.Controller`)."""

    name = NAME

    def __init__(
        self,
        api: AnnounceApi,
        settings: Settings,
        speaker: Callable[[Callable[[bytes], bool]], Speaking],
        links: InterfaceSource,
        *,
        registry: Registry,
        clock: Clock,
        informer: Callable[..., Informer[Any]],
    ) -> None:
        self.api, self.settings, self.clock, self.links = api, settings, clock, links
        self.me, self.timings = settings.node, settings.timings
        self.permissions = permissions(settings)
        self.speaker = speaker(self.answering)
        self.metrics = AnnounceMetrics(registry, self.speaker.counters)
        self._log = logging.LoggerAdapter(log, kv(node=self.me))
        self.outbox = EventOutbox(api, clock, ev.Reporter(names.AGENT, self.me, host=self.me),
                                  namespace="default", capacity=OUTBOX_CAPACITY)  # fmt: skip
        self.pools: Informer[Pool | InvalidPool] = informer(
            api.list_watch("pools"), parse_pool, "pools", POOL_ERRORS)  # fmt: skip
        self.services: Informer[Obj] = informer(api.list_watch("services"), project_service,
                                                "services")  # fmt: skip
        self.slices: Informer[tuple[str, frozenset[str]]] = informer(
            api.list_watch("endpointslices"), project_slice, "endpointslices")  # fmt: skip
        self.nodes: Informer[NodeEntry] = informer(api.list_watch("nodes"), project_node, "nodes")
        self.namespaces: Informer[Mapping[str, str]] = informer(
            api.list_watch("namespaces"), project_labels, "namespaces")  # fmt: skip
        self.leases: Informer[Obj | None] = informer(api.list_watch("leases"), project_lease,
                                                     "leases")  # fmt: skip
        self.states: dict[IPAddress, hold.HoldState] = {}
        self.newest = Newest()
        self.serving: dict[IPAddress, tuple[str, ...]] = {}  # address -> interfaces
        self._interfaces: dict[str, frozenset[IPAddress]] = {}  # as last given to the speaker
        self._targets: dict[IPAddress, Target] = {}

    # ------------------------------------------------------------ the contract
    def watches(self) -> Sequence[rc.Watch]:
        inputs = (self.pools, self.slices, self.nodes, self.namespaces, self.links)
        return [*(rc.Watch(source, self._on_input) for source in inputs),
                rc.Watch(self.services, self._on_service),
                rc.Watch(self.leases, self._on_lease)]  # fmt: skip

    def synced(self) -> Iterable[str]:
        return [ALL]

    def beside(self, fence: rc.Fence) -> Sequence[Coroutine[Any, Any, None]]:
        return [self.outbox.run(), self.speaker.run()]  # Leases are their own fence

    def subject(self, key: str) -> ev.Subject | None:
        return None

    def emit(self, spec: ev.EventSpec, subject: ev.Subject) -> None:
        self.outbox.emit(spec, subject)

    def ready(self) -> tuple[bool, str]:
        informers = (self.pools, self.services, self.slices, self.nodes, self.namespaces,
                     self.leases)  # fmt: skip
        waiting = [i.name for i in informers if not i.has_synced()]
        return (False, "caches not synced: " + ", ".join(waiting)) if waiting else (True, "ok")

    def answering(self, packed: bytes) -> bool:
        """The speaker's fence: asked immediately before every frame."""
        state = self.states.get(ipaddress.ip_address(packed))
        return state is not None and hold.answering(state, self.clock.monotonic())

    # ------------------------------------------------------------ watches: the keys
    def _on_input(self, change: Any) -> list[str]:
        if isinstance(change, Change) and (change.type in ("SYNCED", "BOOKMARK")
                                           or change.old == change.new):  # fmt: skip
            return []
        return [ALL]

    def _on_service(self, change: Change[Obj]) -> list[str]:
        if change.type in ("SYNCED", "BOOKMARK") or change.old == change.new:
            return []
        return [ALL, SERVICE_KEY + change.key]

    def _on_lease(self, change: Change[Obj | None]) -> list[str]:
        address = lease_address(change.key.rpartition("/")[2])
        return [] if address is None or change.type in ("SYNCED", "BOOKMARK") else [str(address)]

    # ------------------------------------------------------------ sync
    async def sync(self, key: str) -> rc.Result:
        if key == ALL:
            self._targets = self._desired_targets()
            leased = (lease_address(key.rpartition("/")[2]) for key in self.leases.cache)
            every = {*self._targets, *self.states, *(a for a in leased if a is not None)}
            return rc.Done(others=tuple(str(a) for a in sorted(every, key=str)))
        if key.startswith(SERVICE_KEY):
            return await self._sync_service(key.removeprefix(SERVICE_KEY))
        return await self._sync_address(ipaddress.ip_address(key))

    def _desired_targets(self) -> dict[IPAddress, Target]:
        endpoints: dict[str, set[str]] = {}
        for service, nodes in self.slices.cache.values():
            endpoints.setdefault(service, set()).update(nodes)
        return desired_targets(
            self.pools.cache.values(), self.services.cache.values(), endpoints,
            self.namespaces.cache, lb_class=self.settings.lb_class,
            classless=self.settings.classless,
        )  # fmt: skip

    def rank(self, address: IPAddress, target: Target | None, holder: str) -> int | None:
        """This Node's place for `address` (None: not eligible), interfaces included."""
        if target is None or not desired_interfaces(address, target.interfaces,
                                                    self.links.current):  # fmt: skip
            return None
        views = [view for view, _ in self.nodes.cache.values()]
        labels = {view.name: node_labels for view, node_labels in self.nodes.cache.values()}
        selected = selected_nodes(target.node_selector, labels)
        everyone = frozenset(labels)  # see the module's docstring: who "announces"
        eligible = choice.eligible(views, selected, everyone, target.traffic)
        return choice.place(address, eligible, self.me, holder)

    async def _sync_address(self, address: IPAddress) -> rc.Result:
        target = self._targets.get(address)
        name = hold.lease_name(address)
        lease = self.newest.pick(name, self.leases.cache.get(self._lease_key(name)))
        record = record_from_lease(lease) if lease is not None else None
        holder = record.holder_identity if record is not None else ""
        state = self.states.get(address, hold.HoldState())
        now = self.clock.monotonic()
        decision = hold.decide(state, record, me=self.me, rank=self.rank(address, target, holder),
                               now=now, wall=self.clock.now(), timings=self.timings)  # fmt: skip
        # the fence, before any write is sent
        self._keep(address, decision.state, target, leased=lease is not None)
        step = decision.step
        if isinstance(step, hold.WaitUntil):
            self._log.debug("%s: %s", address, decision.reason)
            at = step.at
            if target is None and lease is not None and record is not None:
                ready = frozenset(view.name for view, _ in self.nodes.cache.values() if view.ready)
                sweep = cleanup.sweep(decision.state, record, targeted=False, me=self.me,
                                      place=cleanup.place(address, ready, self.me), now=now,
                                      timings=self.timings)  # fmt: skip
                if isinstance(sweep, cleanup.Delete):
                    return await self._delete(address, name, lease, sweep.reason)
                self._log.debug("%s: %s", address, sweep.reason)
                at = sweep.at if at is None else at if sweep.at is None else min(at, sweep.at)
            if at is None:
                return rc.DONE
            return rc.RequeueAfter(max(at - now, 0.01))
        self._log.log(logging.DEBUG if isinstance(step, hold.Renew) else logging.INFO,
                      "%s: %s", address, decision.reason)  # fmt: skip
        return await self._write(
            address, target, name=name, lease=lease, state=decision.state, step=step
        )

    def _lease_key(self, name: str) -> str:
        return f"{self.settings.lease_namespace}/{name}"

    async def _write(
        self,
        address: IPAddress,
        target: Target | None,
        *,
        name: str,
        lease: Obj | None,
        state: hold.HoldState,
        step: hold.Write,
    ) -> rc.Result:
        """One compare-and-swap write; the state and the speaker follow only its success."""
        sent_at = self.clock.monotonic()  # before the request leaves: the fence's start
        was_answering = hold.answering(state, sent_at)
        try:
            if isinstance(step, hold.Acquire) and step.create:
                body = lease_for_create(name, self.settings.lease_namespace, step.record)
                answer = await self.api.create_lease(body)
            else:
                assert lease is not None  # an update is decided on a Lease read
                answer = await self.api.update_lease(lease_for_update(lease, step.record))
        except ApiError as exc:
            return await self._failed(address, name, lease, exc)
        self.newest.saw(name, lease, answer)
        fresh = hold.written(state, step, sent_at, self.timings)
        self._keep(address, fresh, target, leased=True)
        services = tuple(SERVICE_KEY + s for s in target.services) if target else ()
        if isinstance(step, hold.Release):
            self.metrics.releases.inc()
            self._log.info("%s: released", address)
            return rc.Done(others=self._annotated(address) or services)
        if not was_answering:
            self._started(address, target, isinstance(step, hold.Acquire))
            return rc.RequeueAfter(self.timings.renew_period, others=services)
        return rc.RequeueAfter(self.timings.renew_period)

    def _started(self, address: IPAddress, target: Target | None, takeover: bool) -> None:
        """Answering started: announce it, count a takeover, tell the Services."""
        if takeover:
            self.metrics.takeovers.inc()
        announced = self.speaker.announce(address)
        on = ",".join(self.serving.get(address, ())) or "no interface"
        self._log.info("%s: answering on %s%s", address, on,
                       "" if announced else " (nothing to announce on)")  # fmt: skip
        for key in target.services if target else ():
            obj = self.services.cache.get(key)
            if obj is not None:
                message = f"{address} announced by Node {self.me} (ARP/NDP)"
                self.emit(ev.EventSpec("Normal", ANNOUNCING, message), _subject(obj))

    def _annotated(self, address: IPAddress) -> tuple[str, ...]:
        """The Services whose annotation names this Node for `address`."""
        wanted = announcer_annotation(address)
        return tuple(SERVICE_KEY + key for key, obj in self.services.cache.items()
                     if obj["metadata"]["annotations"].get(wanted) == self.me)  # fmt: skip

    async def _failed(
        self, address: IPAddress, name: str, lease: Obj | None, exc: ApiError
    ) -> rc.Result:
        """Nothing changed: the state stays as decided (the fence keeps its time). A conflict
        or a vanished Lease: read it again, and decide again at once."""
        reason = ("conflict" if isinstance(exc, Conflict | NotFound)
                  else "transient" if isinstance(exc, Transient) else "refused")  # fmt: skip
        self.metrics.write_failures.labels(reason).inc()
        if reason != "conflict":
            self._log.warning("%s: writing Lease %s failed: %s", address, name, exc)
            return rc.Retry(f"Lease write: {exc}")
        self._log.info("%s: Lease %s changed meanwhile (%s); reading it again", address, name,
                       exc.message)  # fmt: skip
        return await self._read_again(address, name, lease)

    async def _delete(self, address: IPAddress, name: str, lease: Obj, reason: str) -> rc.Result:
        """The clean-up: delete the Lease at the uid and resourceVersion of the record decided
        on. A conflict or a vanished Lease is a normal outcome (another agent wrote or deleted
        first): nothing changes, the Lease is read again and decided on."""
        try:
            await self.api.delete_lease(name, uid=lease["metadata"].get("uid"),
                                        resource_version=version(lease))  # fmt: skip
        except (Conflict, NotFound) as exc:
            self._log.info("%s: Lease %s not deleted (%s); reading it again", address, name,
                           exc.message)  # fmt: skip
            return await self._read_again(address, name, lease)
        except ApiError as exc:
            failure = "transient" if isinstance(exc, Transient) else "refused"
            self.metrics.write_failures.labels(failure).inc()
            self._log.warning("%s: deleting Lease %s failed: %s", address, name, exc)
            return rc.Retry(f"Lease delete: {exc}")
        self.newest.saw(name, lease, None)
        self.metrics.deleted.inc()
        self._log.info("%s: Lease %s deleted (%s)", address, name, reason)
        return rc.Done(others=(str(address),))

    async def _read_again(self, address: IPAddress, name: str, lease: Obj | None) -> rc.Result:
        try:
            current: Obj | None = await self.api.get_lease(name)
        except NotFound:
            current = None
        except ApiError as again:
            return rc.Retry(f"Lease read: {again}")
        self.newest.saw(name, lease, current)
        return rc.Done(others=(str(address),))

    # ------------------------------------------------------------ the speaker
    def _keep(
        self, address: IPAddress, state: hold.HoldState, target: Target | None, *,
        leased: bool = False,
    ) -> None:  # fmt: skip
        """Remember the state (the fence reads it) and serve the address on its interfaces
        while this agent holds it. `leased`: the address's Lease exists (its record's clock is
        kept for the clean-up)."""
        self.states[address] = state
        interfaces: tuple[str, ...] = ()
        if state.renewed_at is not None and target is not None:
            interfaces = desired_interfaces(address, target.interfaces, self.links.current)
        if interfaces:
            self.serving[address] = interfaces
        else:
            self.serving.pop(address, None)
        if state.renewed_at is None and target is None and not leased:
            # Not held, not announced, no Lease: nothing to remember (a later target starts a
            # new clock, which only delays a takeover)
            self.states.pop(address, None)
        self._update_speaker()

    def _update_speaker(self) -> None:
        wanted: dict[str, set[IPAddress]] = {name: set() for name in self._interfaces}
        for address, interfaces in self.serving.items():
            for interface in interfaces:
                wanted.setdefault(interface, set()).add(address)
        for interface, addresses in wanted.items():
            frozen = frozenset(addresses)
            if self._interfaces.get(interface) != frozen:
                self.speaker.set_addresses(interface, frozen)
            if frozen:
                self._interfaces[interface] = frozen
            else:
                self._interfaces.pop(interface, None)
        self.metrics.announced.set(len(self.serving))

    async def release_all(self) -> None:
        """Stopping: stop answering every address, then release each Lease this agent holds
        (its successor need not wait for it to expire). A failed release is left to expire."""
        held = [a for a, state in self.states.items() if state.renewed_at is not None]
        for address in held:
            self._keep(address, hold.HoldState(self.states[address].observed), None)
        for address in held:
            name = hold.lease_name(address)
            lease = self.newest.pick(name, self.leases.cache.get(self._lease_key(name)))
            record = record_from_lease(lease) if lease is not None else None
            if lease is None or record is None or record.holder_identity != self.me:
                continue
            step = hold.Release(release_record(self.timings.election(self.me), record,
                                               self.clock.now()) or record)  # fmt: skip
            try:
                await self.api.update_lease(lease_for_update(lease, step.record))
            except ApiError as exc:
                self._log.warning("%s: releasing Lease %s failed: %s", address, name, exc)
                continue
            self.metrics.releases.inc()
            self._log.info("%s: released (stopping)", address)

    # ------------------------------------------------------------ the annotation
    async def _sync_service(self, key: str) -> rc.Result:
        """The Service's announcer annotations: this Node's name for each of its addresses
        this agent holds, removed (if it still names this Node) once it does not."""
        obj = self.services.cache.get(key)
        if obj is None:
            return rc.DONE
        patch = plan_annotations(obj, self.me, lambda a: a in self.serving)
        if not patch:
            return rc.DONE
        meta = obj["metadata"]
        try:
            await self.api.patch_service(meta["namespace"], meta["name"], patch)
        except Conflict:  # another Node's name is there now: it is theirs to keep
            return rc.DONE
        except NotFound:
            return rc.DONE
        return rc.DONE


def plan_annotations(obj: Obj, me: str, held: Callable[[IPAddress], bool]) -> list[Obj]:
    """The JSON Patch that makes the Service's announcer annotations say `me` for each of its
    addresses `held` says this Node answers for, and removes those naming `me` for the others
    (with a ``test``, so that a name another Node wrote meanwhile stays). Empty: nothing to
    change."""
    meta = obj.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    ops: list[Obj] = []
    if not meta.get("annotated"):  # the map must exist before a key is added to it
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    for address in ingress_addresses(obj):
        key = announcer_annotation(address)
        path = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
        if held(address) and annotations.get(key) != me:
            ops.append({"op": "add", "path": path, "value": me})
        elif not held(address) and annotations.get(key) == me:
            ops += [{"op": "test", "path": path, "value": me}, {"op": "remove", "path": path}]
    return ops if any(op["path"] != "/metadata/annotations" for op in ops) else []


def _subject(obj: Obj) -> ev.Subject:
    meta = obj["metadata"]
    return ev.Subject("Service", meta["name"], meta.get("uid") or "", "v1",
                      namespace=meta["namespace"])  # fmt: skip

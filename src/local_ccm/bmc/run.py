"""node-bmc as a controller of the kit (`runtime.controller`): each NodeBMC's BMC polled for the
power state, recorded in the NodeBMC's status, and the Node of the same name tainted
`node.cloudprovider.kubernetes.io/shutdown:NoSchedule` while the BMC reads its System Off and
the Node is not Ready (`core.decide`); `runtime.worker.Worker` runs it.

A key is a NodeBMC's name, which is its Node's name. A sync polls the BMC when the poll is due
(every `--bmc-poll-interval`, 10 % jitter; at once for a new or changed spec), writes the
status where it changed, then applies the last poll to the Node. A Node's change (Ready, the
taint) syncs its NodeBMC without polling again: the last poll decides. A failed poll records
its reason in the status and returns `Retry`, so the worker's backoff (5 s doubling to 5 min)
spaces the next polls of that BMC. A taint write is a JSON Patch guarded by resourceVersion; a
conflict goes to the worker, which syncs the key again on a newer Node.

A power-off request (the lifecycle controller's annotation, `core.poweroff`) is recorded in the
status first, with the resourceVersion it was decided on, and only then is the ForceOff sent:
a new leader reads the record and never sends it again.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Final, Protocol

from local_ccm.bmc.api import NODEBMCS, SECRETS, BmcApi
from local_ccm.bmc.clients import CredentialStore, Pollers
from local_ccm.bmc.core import events
from local_ccm.bmc.core.decide import TaintPlan, plan_taint
from local_ccm.bmc.core.errors import BmcError
from local_ccm.bmc.core.model import (
    NodeBmc,
    NodeView,
    bmc_subject,
    node_subject,
    project_bmc,
    project_node,
    stored_reason,
)
from local_ccm.bmc.core.observation import (
    ABSENT_AFTER,
    POWER_STATUSES,
    Observation,
    credentials_missing,
    failed,
    failure_delay,
    invalid_spec,
    observed,
)
from local_ccm.bmc.core.poweroff import WRITES, PowerOffPlan, plan_power_off
from local_ccm.bmc.core.service import Credentials
from local_ccm.bmc.core.spec import BmcSpec, InvalidSpec
from local_ccm.bmc.core.status import desired_status, read_before
from local_ccm.bmc.core.system import System
from local_ccm.bmc.core.writes import taint_patch
from local_ccm.bmc.metrics import BmcMetrics
from local_ccm.bmc.options import NAME, Settings
from local_ccm.bmc.redfish import Exchange
from local_ccm.clock import Clock
from local_ccm.kube.errors import ApiError, Conflict, Forbidden, NotFound, Transient, Unauthorized
from local_ccm.kube.informer import Change, ErrorKinds, Informer, ListWatch
from local_ccm.records import dataclass
from local_ccm.runtime import events as ev
from local_ccm.runtime.controller import (
    DONE,
    Fence,
    Permission,
    RequeueAfter,
    Result,
    Retry,
    Watch,
    open_fence,
)
from local_ccm.runtime.events import EventSpec
from local_ccm.runtime.parts import Informers, LastWrites, event_outbox

log = logging.getLogger(__name__)
# The NodeBMC list answers 404 while the CRD is not installed: wait for it like for a restart.
BMC_ERRORS: Final = ErrorKinds(retried=(Transient, Forbidden, Unauthorized, NotFound))
SPARE_THREADS: Final = 4  # beyond one per worker: calls cancelled while a thread still ends
ANSWERED: Final = ("Contacted", "SystemNotFound")
FORCE_OFF: Final = "ForceOff"  # a reset type that names its end state: repeating it changes nothing


def permissions(settings: Settings) -> tuple[Permission, ...]:
    """The RBAC node-bmc needs (the chart's ClusterRole for it and its Secrets Role, the Node
    watch the lifecycle controller's, Events the `--event-namespace` Role), nothing more."""
    secrets = settings.credentials_namespace
    return (
        Permission(NODEBMCS.group, NODEBMCS.plural, ("list", "watch")),
        Permission(NODEBMCS.group, f"{NODEBMCS.plural}/status", ("patch",)),
        Permission("", "nodes", ("list", "watch", "patch")),
        Permission(SECRETS.group, SECRETS.plural, ("get",), namespace=secrets),
        Permission("", "events", ("create",), namespace=settings.event_namespace),
    )


class Readers(Protocol):
    """What reads the BMCs (`clients.Pollers`): one System per NodeBMC name."""

    async def read(self, key: str, spec: BmcSpec, credentials: Credentials) -> System: ...
    async def reset(
        self, key: str, spec: BmcSpec, credentials: Credentials, reset_type: str
    ) -> None: ...
    async def drop(self, key: str) -> None: ...
    async def close(self) -> None: ...


@dataclass(frozen=True)
class Track:
    """What the controller knows of one NodeBMC between syncs (this term only)."""

    polled_for: tuple[str, int]  # the NodeBMC's (uid, generation) the last poll was made for
    observation: Observation
    due: float  # monotonic: when the next poll is due
    last_read: str | None  # the last power state the BMC answered (for PowerStateChanged)
    warned: bool = False  # the Off-while-Ready warning was sent for this episode
    refused: str | None = None  # the power-off request last refused (its Event sent)
    read_for: tuple[str, int] | None = None  # (uid, generation) a System was last read at
    node_uuid: str = ""  # the Node's systemUUID the last poll's System was compared with


def _not_found(bmc: NodeBmc, current: Mapping[str, Any], track: Track | None) -> int:
    """This poll's place in a row of 404s, if it is one: one more than the last poll's at the
    same spec. A status already Absent at this generation (an earlier term confirmed it) is
    the whole row: the System stays Absent through a restart of the controller."""
    status = current.get("status") or {}
    if status.get("powerState") == "Absent" and status.get("observedGeneration") == bmc.generation:
        return ABSENT_AFTER
    same = track is not None and track.polled_for == (bmc.uid, bmc.generation)
    return (track.observation.not_found if track is not None and same else 0) + 1


class Controller:
    """The leader's state and decisions for one term (`runtime.controller.Controller`)."""

    name = NAME

    def __init__(
        self,
        api: BmcApi,
        nodes: ListWatch,
        settings: Settings = Settings(),  # noqa: B008 (frozen)
        *,
        metrics: BmcMetrics,
        clock: Clock,
        rng: random.Random | None = None,
        pollers: Readers | None = None,
    ) -> None:
        """`pollers`: how BMCs are read (None: Redfish, in a thread pool of the controller's
        own, so slow BMCs never hold the threads the API client needs)."""
        self.api, self.settings, self.metrics, self.clock = api, settings, metrics, clock
        self.rng = rng or random.Random()
        self.permissions = permissions(settings)
        self.outbox = event_outbox(api, clock, NAME, instance=settings.instance,
                                   namespace=settings.event_namespace)  # fmt: skip
        informers = Informers(clock, rng, metrics.watch_ended)
        self.nodes: Informer[NodeView] = informers.make(nodes, project_node, "nodes")
        self.bmcs: Informer[NodeBmc] = informers.make(api.list_watch(), project_bmc, "nodebmcs",
                                                      BMC_ERRORS)  # fmt: skip
        self.executor = ThreadPoolExecutor(settings.concurrent_polls + SPARE_THREADS,
                                           thread_name_prefix="bmc")  # fmt: skip
        self.pollers: Readers = pollers or Pollers(
            self.executor, clock, self._exchanged, connect_timeout=settings.connect_timeout,
            read_timeout=settings.read_timeout,
        )  # fmt: skip
        self.credentials = CredentialStore(api, settings.credentials_namespace, clock,
                                           settings.credentials_max_age)  # fmt: skip
        self.tracks: dict[str, Track] = {}
        self.written = LastWrites()  # the status this controller wrote, while the cache lags
        self.fence: Fence = open_fence  # the worker's, once `beside` handed it over

    def watches(self) -> Sequence[Watch]:
        """Nodes first: a NodeBMC is decided against a full Node cache."""
        return [Watch(self.nodes, self._on_node), Watch(self.bmcs, self._on_bmc)]

    def synced(self) -> Iterable[str]:
        stale = [n.name for n in self.nodes.cache.values() if n.is_ready and n.is_shut_down]
        return [*self.bmcs.cache, *(name for name in stale if name not in self.bmcs.cache)]

    def beside(self, fence: Fence) -> Sequence[Coroutine[Any, Any, None]]:
        self.fence = fence  # a write after a BMC's answer waits for it
        return [self.outbox.run(), self._hold_clients()]

    def subject(self, key: str) -> ev.Subject | None:
        bmc = self.bmcs.cache.get(key)
        return None if bmc is None else bmc_subject(bmc)

    def emit(self, spec: ev.EventSpec, subject: ev.Subject) -> None:
        self.outbox.once(spec, subject, spec.message)

    def ready(self) -> tuple[bool, str]:
        synced = self.bmcs.has_synced() and self.nodes.has_synced()
        return (True, "ok") if synced else (False, "NodeBMC and Node caches not synced")

    async def _hold_clients(self) -> None:
        """Runs for the term; at its end every client is closed and the threads let go."""
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            await self.pollers.close()
            self.executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------ watches: the keys

    def _on_bmc(self, change: Change[NodeBmc]) -> Iterable[str]:
        """A NodeBMC added, deleted, with a new spec or power-off request; not its status (our
        own writes)."""
        old, new = change.old, change.new
        if change.type in ("ADDED", "DELETED"):
            return [change.key]
        if change.type != "MODIFIED":
            return []
        same = (
            old is not None
            and new is not None
            and (old.uid, old.generation, old.power_off) == (new.uid, new.generation, new.power_off)
        )
        return [] if same else [change.key]

    def _on_node(self, change: Change[NodeView]) -> Iterable[str]:
        """A Node whose readiness or shutdown taint changed: its NodeBMC's last poll decides
        again (no new poll). A Ready Node with the taint and no NodeBMC loses it too."""
        new = change.new
        if change.type not in ("ADDED", "MODIFIED") or new is None or new.decides_alike(change.old):
            return []
        if change.key in self.bmcs.cache or (new.is_ready and new.is_shut_down):
            return [change.key]
        return []

    # ------------------------------------------------------------ one NodeBMC

    async def sync(self, key: str) -> Result:
        """Poll when due, write the status, apply the last poll to the Node."""
        bmc = self.bmcs.cache.get(key)
        if bmc is None:
            return await self._gone(key)
        track = self.tracks.get(key)
        if track is None or track.polled_for != (bmc.uid, bmc.generation) or \
                track.node_uuid != self._node_uuid(key) or \
                self.clock.monotonic() >= track.due:  # fmt: skip
            track = await self._poll(key, bmc, track)
        await self._write_status(key, bmc, track)
        await self._apply(key, bmc, track)
        await self._power_off(key, bmc, track)
        reason = track.observation.reason
        if reason == "InvalidSpec":
            return DONE  # nothing to ask until the spec changes (its watch event syncs it)
        if reason not in ANSWERED:
            return Retry(f"{reason}: {track.observation.message}")
        return RequeueAfter(max(0.0, track.due - self.clock.monotonic()))

    async def _gone(self, key: str) -> Result:
        """The NodeBMC is deleted: its client closed; a Ready Node still loses the taint."""
        await self.pollers.drop(key)
        self.tracks.pop(key, None)
        self.written.forget(key)
        self._count()
        node = self.nodes.cache.get(key)
        await self._taint(key, node, plan_taint(None, node))
        return DONE

    async def _poll(self, key: str, bmc: NodeBmc, track: Track | None) -> Track:
        """Ask the BMC (unless the spec or the credentials stop it) and record the answer."""
        spec, now = bmc.spec, self.clock.now()
        if isinstance(spec, InvalidSpec):
            await self.pollers.drop(key)
            observation = invalid_spec(spec.message, now)
        else:
            refused = track is not None and track.observation.reason == "AuthFailed"
            credentials = await self.credentials.get(spec.credentials_name, fresh=refused)
            if isinstance(credentials, str):
                observation = credentials_missing(credentials, now)
            else:
                try:
                    system = await self.pollers.read(key, spec, credentials)
                    observation = observed(system, self.clock.now(), self._node_uuid(key))
                except BmcError as exc:
                    _, current = self._current(key, bmc)
                    seen = read_before(current["status"], bmc.generation) or (
                        track is not None and track.read_for == (bmc.uid, bmc.generation)
                    )
                    observation = failed(exc, self.clock.now(), read_before=seen,
                                         padded=credentials.padded,
                                         not_found=_not_found(bmc, current, track))  # fmt: skip
        return self._observed(key, bmc, track, observation)

    def _node_uuid(self, key: str) -> str:
        """The systemUUID of the Node of the NodeBMC's name ("" without one): a System that is
        another machine's says nothing about this Node (`observation.is_other_machine`)."""
        node = self.nodes.cache.get(key)
        return node.system_uuid if node is not None else ""

    def _observed(
        self, key: str, bmc: NodeBmc, track: Track | None, observation: Observation
    ) -> Track:
        """The new track after a poll: its Events, log line and metrics."""
        last_reason = stored_reason(bmc.status)
        before = track.observation if track is not None else None
        subject = bmc_subject(bmc)
        for spec in events.poll_events(before, last_reason, observation):
            log.log(logging.WARNING if spec.type == "Warning" else logging.INFO,
                    "node=%s: %s: %s", key, spec.reason, spec.message)  # fmt: skip
            self.outbox.emit(spec, subject)
            node = self.nodes.cache.get(key)
            if observation.reason == "SystemNotFound" and node is not None:
                self.outbox.emit(events.system_absent(key, observation), node_subject(node))
        last_read = track.last_read if track is not None else (
            bmc.status.get("powerState") if last_reason in ANSWERED else None)  # fmt: skip
        if observation.answered:
            if last_read is not None and last_read != observation.power:
                log.info("node=%s: power state %s -> %s", key, last_read, observation.power)
                self.outbox.emit(events.power_changed(str(last_read), observation), subject)
            last_read = observation.power
            delay = self.settings.poll_interval * (1 + self.rng.uniform(-1, 1)
                                                   * self.settings.jitter)  # fmt: skip
        else:
            self.metrics.errors.labels(observation.reason).inc()
            delay = failure_delay(observation, *self.settings.backoff)
        log.debug("node=%s: %s", key, observation.message)
        new = Track((bmc.uid, bmc.generation), observation, self.clock.monotonic() + delay,
                    last_read, warned=track.warned if track is not None else False,
                    refused=track.refused if track is not None else None,
                    read_for=(bmc.uid, bmc.generation) if observation.reachable
                    else track.read_for if track is not None else None,
                    node_uuid=self._node_uuid(key))  # fmt: skip
        self.tracks[key] = new
        self._count()
        return new

    def _count(self) -> None:
        counts = Counter(t.observation.power for t in self.tracks.values())
        for state in POWER_STATUSES:
            self.metrics.power_states.labels(state).set(counts[state])

    def _exchanged(self, exchange: Exchange) -> None:
        self.metrics.request_duration.labels(exchange.method).observe(exchange.seconds)

    # ------------------------------------------------------------ writes

    def _current(self, key: str, bmc: NodeBmc) -> tuple[dict[str, Any], dict[str, Any]]:
        """The NodeBMC as cached, and as this controller last wrote it while the cache lags."""
        base = {"metadata": {"resourceVersion": bmc.resource_version}, "status": bmc.status}
        return base, self.written.fresh(key, base) or base

    async def _write_status(self, key: str, bmc: NodeBmc, track: Track) -> None:
        """The status the last poll gives, where it differs from what the NodeBMC shows (or
        from this controller's last write while the cache lags it). `lastContact` alone is
        refreshed more often while the Node is not Ready: the lifecycle controller acts only
        on fresh readings, and only about Nodes that are not Ready."""
        base, current = self._current(key, bmc)
        node = self.nodes.cache.get(key)
        refresh = self.settings.contact_refresh if node is None or node.is_ready else \
            self.settings.contact_refresh_not_ready  # fmt: skip
        wanted = desired_status(current["status"], track.observation, track.polled_for[1],
                                refresh=refresh)  # fmt: skip
        if wanted is None:
            return
        await self.fence()
        try:
            answer = await self.api.write_status(key, wanted)
        except NotFound:
            return  # deleted meanwhile: its DELETED event comes
        version = str((answer.get("metadata") or {}).get("resourceVersion", ""))
        self.written.wrote(key, base, {"metadata": {"resourceVersion": version},
                                       "status": answer.get("status") or wanted})  # fmt: skip

    async def _apply(self, key: str, bmc: NodeBmc, track: Track) -> None:
        """The last poll applied to the Node as the cache shows it now (the poll took time)."""
        node = self.nodes.cache.get(key)
        plan = plan_taint(track.observation, node)
        if node is not None and plan.ready_but_off != track.warned:
            self.tracks[key] = replace(track, warned=plan.ready_but_off)
            if plan.ready_but_off:
                spec = events.ready_but_off(bmc.name, track.observation)
                log.warning("node=%s: %s", key, spec.message)
                self.outbox.emit(spec, node_subject(node))
        await self._taint(key, node, plan)

    async def _taint(self, key: str, node: NodeView | None, plan: TaintPlan) -> None:
        """Send the plan's taint write; a conflict or another API error is the worker's."""
        if node is None or plan.action is None:
            return
        await self.fence()
        try:
            await self.api.patch_node(key, taint_patch(node, plan.action))
        except NotFound:
            return  # the Node is gone: nothing to taint
        except Conflict:
            self.metrics.taint_writes.labels(plan.action, "conflict").inc()
            raise
        except ApiError:
            self.metrics.taint_writes.labels(plan.action, "error").inc()
            raise
        self.metrics.taint_writes.labels(plan.action, "success").inc()
        spec = events.taint_event(plan)
        log.info("node=%s: %s", key, spec.message)
        self.outbox.emit(spec, node_subject(node))

    # ------------------------------------------------------------ power-off requests

    async def _power_off(self, key: str, bmc: NodeBmc, track: Track) -> None:
        """The request's next step (`core.poweroff`): the record written first, guarded by the
        version it was decided on (a conflict goes to the worker, which decides again on the
        newer NodeBMC), then the ForceOff, sent once."""
        base, current = self._current(key, bmc)
        plan = plan_power_off(bmc.power_off, current["status"].get("powerOff"),
                              self.nodes.cache.get(key), track.observation,
                              now=self.clock.now(),
                              timeout=self.settings.power_off_timeout)  # fmt: skip
        latest = self.tracks.get(key, track)
        if plan.step == "refuse" and latest.refused != plan.request:
            self.tracks[key] = replace(latest, refused=plan.request)
            self._power_off_done(key, bmc, plan, "refused")
        if plan.step not in WRITES or plan.record is None:
            return
        await self.fence()
        version = str(current["metadata"]["resourceVersion"])
        try:
            answer = await self.api.write_power_off(key, plan.record, version)
        except NotFound:
            return  # deleted meanwhile: its DELETED event comes
        self.written.wrote(key, base, {"metadata": answer.get("metadata") or {},
                                       "status": answer.get("status") or {}})  # fmt: skip
        if plan.step == "send":
            await self._send_force_off(key, bmc, plan)
        outcome = {"send": "sent", "fail": "failed"}.get(plan.step, "confirmed")
        self._power_off_done(key, bmc, plan, outcome)

    async def _send_force_off(self, key: str, bmc: NodeBmc, plan: PowerOffPlan) -> None:
        """The ForceOff, once: a failure is reported, never retried (the request is recorded
        as sent; a poll reading Off confirms it, the timeout fails it)."""
        spec = bmc.spec
        credentials = None if isinstance(spec, InvalidSpec) else await self.credentials.get(
            spec.credentials_name)  # fmt: skip
        if isinstance(spec, InvalidSpec) or not isinstance(credentials, Credentials):
            problem = "the spec is invalid" if isinstance(spec, InvalidSpec) else credentials
            self._report(key, bmc, EventSpec("Warning", "PowerOffError",
                                             f"ForceOff not sent: {problem}"))  # fmt: skip
            return
        try:
            await self.pollers.reset(key, spec, credentials, FORCE_OFF)
        except BmcError as exc:
            self._report(key, bmc, EventSpec("Warning", "PowerOffError", f"ForceOff for "
                         f"request {plan.request!r}: {exc.message}; not sent again"))  # fmt: skip

    def _power_off_done(self, key: str, bmc: NodeBmc, plan: PowerOffPlan, outcome: str) -> None:
        self.metrics.power_offs.labels(outcome).inc()
        spec = events.power_off_event(plan.step, plan.message)
        if spec is not None:
            self._report(key, bmc, spec)

    def _report(self, key: str, bmc: NodeBmc, spec: EventSpec) -> None:
        """A power-off Event on the NodeBMC and its Node, and its log line."""
        level = logging.WARNING if spec.type == "Warning" else logging.INFO
        log.log(level, "node=%s: %s: %s", key, spec.reason, spec.message)
        self.outbox.emit(spec, bmc_subject(bmc))
        node = self.nodes.cache.get(key)
        if node is not None:
            self.outbox.emit(spec, node_subject(node))

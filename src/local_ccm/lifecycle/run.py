"""node-lifecycle-controller as a controller of the kit (`runtime.controller`): its decision is
global, so it has one key, `NODES`, synced on every relevant Node change, on the result of
its own work and after `--reconcile-interval` (or sooner, when a waiting Node reaches the
timeout), as kube-controller-manager's periodic monitors do. `runtime.worker.Worker` runs it.

A sync of `NODES` evaluates the Node cache with the pure core (`assess` -> `plan_deletions`),
sends the plan's Events and hands its slow work to keys of their own, which the other workers
run beside the evaluation: `probe/<uid>`, `self-check`, `delete/<uid>` (one deletion
attempt) and `fence/<uid>` (one power-off request); each ends by naming `NODES`, so its
result is evaluated at once. With `--bmc-power-state` a second informer caches the NodeBMCs
(`core.bmc.BmcView`); a change of one that can change a decision is evaluated like a Node's.

One event loop, no locks: state is only changed by code running on it, between awaits.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from local_ccm import names
from local_ccm.clock import Clock
from local_ccm.kube import errors as ke
from local_ccm.kube.errors import Forbidden, NotFound, Transient, Unauthorized
from local_ccm.kube.informer import Change, ErrorKinds, Informer, ListWatch, StreamEnd
from local_ccm.kube.nodes import NodeListWatch
from local_ccm.lifecycle.api import NODEBMCS, BmcApi, NodeApi, Obj
from local_ccm.lifecycle.attempt import Attempt
from local_ccm.lifecycle.core import events as ev
from local_ccm.lifecycle.core import state as pl
from local_ccm.lifecycle.core.bmc import BmcView, project_bmc
from local_ccm.lifecycle.core.deletions import plan_deletions
from local_ccm.lifecycle.core.health import Assessment, Episode, assess, eligible_at
from local_ccm.lifecycle.core.model import (
    IPAddress,
    NodeView,
    ProbeKind,
    ProbeOutcome,
    combine,
    project_node,
    summarize,
)
from local_ccm.lifecycle.fence import FenceRequest
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.lifecycle.probe import Prober
from local_ccm.logs import kv
from local_ccm.runtime import events as rev
from local_ccm.runtime.controller import (
    Done,
    Fence,
    Permission,
    RequeueAfter,
    Result,
    Watch,
    open_fence,
)
from local_ccm.runtime.events import EventBudget, Reporter, admit, forget, node
from local_ccm.runtime.outbox import EventOutbox

log = logging.getLogger(__name__)

NAME = "node-lifecycle"
NODES = "nodes"  # the one key of the evaluation
SELF_CHECK = "self-check"
PROBE, DELETE, FENCE = "probe/", "delete/", "fence/"  # + the Node's uid
MIN_WAKE = 0.05
NOT_SYNCED = "the Node cache is not synced"
BMC_NOT_SYNCED = "the NodeBMC cache is not synced (is the NodeBMC CRD installed?)"
DISCONNECTED = "the Node watch is disconnected"
AGAIN = (NODES,)  # what a finished piece of work names: evaluate its result now
# The work an evaluation plans: it runs, then names the keys worth a look.
Work = Callable[[], Coroutine[Any, Any, tuple[str, ...]]]
# An attempt turned back by a Node that changed (the fresh GET or the DELETE's preconditions
# disagree with the cache) leaves the evaluation to that change's watch event or the period:
# evaluated at once, a cache that lags would have the same attempt planned again, in a loop.
TURNED_BACK = frozenset({"aborted", "precondition_failed"})
# The NodeBMC list answers 404 while the CRD is not installed: retried like a restart, and
# nothing is evaluated meanwhile (a Node's NodeBMC unknown must not read as "has none").
BMC_ERRORS = ErrorKinds(retried=(Transient, Forbidden, Unauthorized, NotFound))


def permissions(
    *, event_namespace: str, out_of_service: bool, bmc: bool = False, fencing: bool = False
) -> tuple[Permission, ...]:
    """The RBAC the controller needs (the chart's ClusterRole for it, Events the
    `--event-namespace` Role); leader election adds its own (`runtime.access`)."""
    needed = [
        Permission("", "nodes", ("get", "list", "watch", "delete")),
        Permission("", "events", ("create",), namespace=event_namespace),
    ]
    if out_of_service:
        needed.append(Permission("", "nodes", ("patch",)))
        needed.append(Permission("storage.k8s.io", "volumeattachments", ("list",)))
    if bmc:
        needed.append(Permission(NODEBMCS.group, NODEBMCS.plural, ("get", "list", "watch")))
    if bmc and fencing:
        needed.append(Permission(NODEBMCS.group, NODEBMCS.plural, ("patch",)))
    return tuple(needed)


def _node_kv(name: str, uid: str, **more: object) -> dict[str, Any]:
    return kv(node=name, uid=uid, **more)


def _bind(run: Callable[..., Coroutine[Any, Any, tuple[str, ...]]], *args: Any) -> Work:
    return lambda: run(*args)


class Controller:
    """The leader's state and decisions for one term (`runtime.controller.Controller`): a new
    leader starts from a fresh LIST."""

    name = NAME

    def __init__(
        self,
        config: pl.LoopConfig,
        api: NodeApi,
        prober: Prober,
        clock: Clock,
        *,
        metrics: LifecycleMetrics,
        identity: str,
        rng: random.Random | None = None,
        nodes: ListWatch | None = None,
        bmcs: BmcApi | None = None,
    ) -> None:
        """`bmcs`: the NodeBMCs' API, used when `--bmc-power-state` is on."""
        self.config, self.api, self.prober, self.clock = config, api, prober, clock
        self.metrics, self.identity = metrics, identity
        settings = config.settings
        self.bmcs = bmcs if settings.bmc_power_state else None
        self.permissions = permissions(
            event_namespace=config.event_namespace, out_of_service=settings.out_of_service_taint,
            bmc=self.bmcs is not None, fencing=settings.bmc_fencing,
        )  # fmt: skip
        self.rng = rng or random.Random()
        self.informer = Informer(
            nodes or NodeListWatch(api, config.selector), self.project, clock=clock, rng=self.rng,
            name="Nodes", on_end=self._stream_ended, on_watch=self._watching,
        )  # fmt: skip
        self.bmc_informer: Informer[BmcView] | None = None if self.bmcs is None else Informer(
            self.bmcs.list_watch_nodebmcs(), project_bmc, clock=clock, rng=self.rng,
            name="NodeBMCs", errors=BMC_ERRORS, on_end=self._bmc_stream_ended,
        )  # fmt: skip
        self.episodes: dict[str, Episode] = {}
        self.ready_seen: dict[str, float] = {}  # uid -> monotonic time last seen Ready
        self.state = pl.PipelineState()
        self._breaker_was_open = False  # for logging its transitions
        self.next_wake = config.interval
        self.connected = False
        self.disconnected_at: float | None = None
        self.last_evaluation: float | None = None
        self._annotation_keys = {p.key for p in config.scope.protected}
        self.work: dict[str, Work] = {}  # key: the latest work planned for it
        self.fence: Fence = open_fence
        self.outbox = EventOutbox(
            api, clock, Reporter(names.LIFECYCLE, identity), namespace=config.event_namespace
        )
        self._failed = EventBudget()  # DeletingNodeFailed: once per 10 min per Node

    # ------------------------------------------------------------------ the contract
    def watches(self) -> Sequence[Watch]:
        bmcs = [] if self.bmc_informer is None else [Watch(self.bmc_informer, self._bmc_changed)]
        return [Watch(self.informer, self._changed), *bmcs]

    def synced(self) -> Iterable[str]:
        return [NODES]

    def beside(self, fence: Fence) -> Sequence[Coroutine[Any, Any, None]]:
        self.fence = fence  # a deletion attempt's writes wait for it
        return [self.outbox.run()]

    async def sync(self, key: str) -> Result:
        """`NODES`: evaluate, plan; any other key: the work planned for it, then `NODES`."""
        if key == NODES:
            return RequeueAfter(self.next_wake, others=self.evaluate())
        work = self.work.pop(key, None)
        return Done(others=AGAIN if work is None else await work())

    def subject(self, key: str) -> rev.Subject | None:
        _, _, uid = key.partition("/")
        view = next((n for n in self.cache.values() if n.uid == uid), None) if uid else None
        return None if view is None else node(view.name, view.uid)

    def emit(self, spec: rev.EventSpec, subject: rev.Subject) -> None:
        self.outbox.once(spec, subject, spec.message)

    def ready(self) -> tuple[bool, str]:
        """The Node cache listed, and its watch not down for two intervals."""
        if not self.informer.has_synced():
            return False, NOT_SYNCED
        if self.bmc_informer is not None and not self.bmc_informer.has_synced():
            return False, BMC_NOT_SYNCED
        gone, limit = self.disconnected_at, 2 * self.config.interval
        if self.connected or gone is None or self.clock.monotonic() - gone < limit:
            return True, "ok"
        return False, DISCONNECTED

    def evaluating(self) -> tuple[bool, str]:
        """Liveness: evaluations keep coming once the cache has listed."""
        limit, last = max(3 * self.config.interval, 60.0), self.last_evaluation
        if last is None:
            return True, ""
        ok = self.clock.monotonic() - last < limit
        return ok, "" if ok else f"no evaluation completed within {limit:g}s"

    # ------------------------------------------------------------------ cache
    @property
    def cache(self) -> Mapping[str, NodeView]:
        return self.informer.cache

    def project(self, obj: Obj) -> NodeView:
        return project_node(obj, self._annotation_keys)

    def _watching(self) -> None:
        self.connected, self.disconnected_at = True, None

    def _stream_ended(self, end: StreamEnd) -> None:
        if end.reason == "stopped":
            return
        self.connected = False
        if self.disconnected_at is None:
            self.disconnected_at = self.clock.monotonic()
        self.metrics.watch_restarts.labels(self.metrics.controller, "nodes", end.reason).inc()

    @property
    def bmc_cache(self) -> Mapping[str, BmcView] | None:
        return None if self.bmc_informer is None else self.bmc_informer.cache

    def _bmc_stream_ended(self, end: StreamEnd) -> None:
        if end.reason != "stopped":
            labels = (self.metrics.controller, NODEBMCS.plural, end.reason)
            self.metrics.watch_restarts.labels(*labels).inc()

    def _bmc_changed(self, change: Change[BmcView]) -> Iterable[str]:
        """A NodeBMC added, deleted or changed in what a decision reads; node-bmc's refresh
        of `lastContact` alone only moves a reading's age, which the next evaluation sees."""
        old, new = change.old, change.new
        if change.type in ("ADDED", "DELETED"):
            return [NODES]
        if change.type == "MODIFIED" and old is not None and new is not None:
            same = replace(old, resource_version="", last_contact=None) == replace(
                new, resource_version="", last_contact=None)  # fmt: skip
            return [] if same else [NODES]
        return []

    def _changed(self, change: Change[NodeView]) -> Iterable[str]:
        if change.type in ("ADDED", "DELETED"):
            return [NODES]
        if change.type == "MODIFIED" and change.old is not None and change.new is not None:
            # A heartbeat changes only the resourceVersion: nothing to re-evaluate.
            old, new = change.old, change.new
            if replace(old, resource_version="") != replace(new, resource_version=""):
                return [NODES]
        return []

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> tuple[str, ...]:
        """Assess and plan once; send the Events; the keys of the work planned."""
        started, now = time.perf_counter(), self.clock.now()
        mono = self.clock.monotonic()
        nodes = tuple(self.cache.values())
        previous = self.episodes
        assessment = assess(nodes, self.config.scope, previous, now, self.config.timeout,
                            mono=mono, ready_seen=self.ready_seen)  # fmt: skip
        self.episodes = dict(assessment.episodes.episodes)
        self.ready_seen = dict(assessment.episodes.ready_seen)
        self._log_episodes(assessment, previous)
        state = pl.forget(self.state, assessment.episodes.ended)
        plan = plan_deletions(
            assessment, nodes=nodes, scope=self.config.scope, state=state,
            settings=self.config.settings, now=mono, rng=self.rng, bmcs=self.bmc_cache,
            wall=now,
        )  # fmt: skip
        self.state = plan.state
        self._publish(assessment, plan)
        keys = self._act(plan, mono)
        self.next_wake = self._next_wake(assessment)
        self.last_evaluation = self.clock.monotonic()
        self.metrics.evaluation.observe(time.perf_counter() - started)
        return keys

    def _log_episodes(self, assessment: Assessment, previous: dict[str, Episode]) -> None:
        for uid in assessment.episodes.started:
            name = assessment.episodes.episodes[uid].name
            log.info("Node is NotReady: episode started", extra=_node_kv(name, uid))
        for uid in assessment.episodes.ended:
            self._failed = forget(self._failed, uid)
            name = previous[uid].name if uid in previous else ""
            log.info("NotReady episode ended", extra=_node_kv(name, uid))

    def _next_wake(self, assessment: Assessment) -> float:
        """The interval, or sooner when a waiting Node reaches the timeout."""
        now, wake = self.clock.now(), self.config.interval
        for health in assessment.managed_nodes:
            at = eligible_at(health, self.config.timeout) if health.status == "waiting" else None
            if at is not None:
                wake = min(wake, (at - now).total_seconds())
        return max(MIN_WAKE, wake)

    def _publish(self, assessment: Assessment, plan: pl.Plan) -> None:
        m = self.metrics
        m.watched.set(len(self.cache))
        m.population.set(assessment.population)
        m.managed.set(assessment.managed)
        m.protected.set(assessment.protected)
        m.unhealthy.labels("population").set(assessment.unhealthy)
        m.unhealthy.labels("managed").set(assessment.managed_unhealthy)
        m.eligible.set(len(assessment.eligible))
        m.breaker_open.set(1 if plan.breaker.open else 0)
        m.breaker_threshold.set(plan.breaker.threshold)
        if plan.breaker.open != self._breaker_was_open:
            level = logging.WARNING if plan.breaker.open else logging.INFO
            state = "open: nothing is deleted" if plan.breaker.open else "closed"
            log.log(level, "circuit breaker %s (%s)", state, plan.breaker)
            self._breaker_was_open = plan.breaker.open
        if self.state.self_check is not None:
            m.set_self_check(self.state.self_check.result)
        for decision in plan.decisions:
            log.debug("decision %s", decision.step, extra=_node_kv(decision.name, decision.uid))

    def _act(self, plan: pl.Plan, now: float) -> tuple[str, ...]:
        for event in plan.events:
            if event.reason in ev.BMC_REASONS:  # a step of an action: a log line too
                level = logging.WARNING if event.type == "Warning" else logging.INFO
                log.log(level, "%s: %s", event.reason, event.message,
                        extra=_node_kv(event.name, event.uid))  # fmt: skip
            self._emit(event.uid, event.name, event.reason, event.message)
        for _, reason in plan.skips:
            self.metrics.skipped.labels(reason).inc()
        for request in plan.probes:
            self._plan(PROBE + request.uid, _bind(self._probe, request, now))
        if plan.self_check_probes:
            self._plan(SELF_CHECK, _bind(self._self_check, plan.self_check_probes))
        for action in plan.deletions:
            self._plan(DELETE + action.uid, _bind(self._attempt, action))
        for fence in plan.fences:
            self._plan(FENCE + fence.uid, _bind(self._fence, fence))
        keys = [PROBE + r.uid for r in plan.probes] + [DELETE + a.uid for a in plan.deletions]
        keys += [FENCE + f.uid for f in plan.fences]
        return (*keys, *([SELF_CHECK] if plan.self_check_probes else []))

    def _plan(self, key: str, work: Work) -> None:
        # A request is never dropped, or a record left "running" would wait for a result
        # forever: a newer one for the key replaces one not started yet (stale results are
        # told apart by their start time), and one planned while the key's work runs is run
        # after it (the queue holds the key back until then).
        self.work[key] = work

    # ------------------------------------------------------------------ Events
    def _emit(self, uid: str, name: str, reason: str, message: str) -> None:
        self.outbox.emit(ev.spec(reason, message), node(name, uid))

    def announce(self, uid: str, name: str, reason: str, message: str) -> None:
        """Loop-side Events, also at most once per (uid, reason) per episode."""
        if (uid, reason) not in self.state.announced:
            self.state = replace(self.state, announced=self.state.announced | {(uid, reason)})
            self._emit(uid, name, reason, message)

    # ------------------------------------------------------------------ probes
    async def run_probe(
        self, addresses: Sequence[IPAddress], kinds: Sequence[ProbeKind]
    ) -> tuple[ProbeOutcome, ...]:
        """One Node's probe; a prober failure is an `error` outcome, never a crash."""
        pairs = len(addresses) * len(kinds)
        self.metrics.in_flight.inc(pairs)
        try:
            outcomes = await self.prober.probe(addresses, kinds)
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}"
            outcomes = tuple(ProbeOutcome(a, k, "error", detail) for a in addresses for k in kinds)
        finally:
            self.metrics.in_flight.dec(pairs)
        for outcome in outcomes:
            labels = (outcome.kind.name, outcome.family, outcome.outcome)
            self.metrics.probes.labels(*labels).inc()
            self.metrics.probe_duration.labels(outcome.kind.name).observe(outcome.duration)
        return outcomes

    async def _probe(self, request: pl.ProbeRequest, started: float) -> tuple[str, ...]:
        outcomes = await self.run_probe(request.addresses, request.kinds)
        record = self.state.probes.get(request.uid)
        if record is None or record.started != started:
            return AGAIN  # the Node stopped being eligible meanwhile; a newer probe counts
        verdict = combine(outcomes)
        self.metrics.verdicts.labels(verdict).inc()
        before = self.state.probes.get(request.uid)
        level = logging.INFO if before is None or before.verdict != verdict else logging.DEBUG
        fields = _node_kv(request.name, request.uid, verdict=verdict)
        log.log(level, "probe verdict %s: %s", verdict, summarize(outcomes), extra=fields)
        self.state = pl.record_probe(self.state, request.uid, outcomes, self.clock.monotonic())
        return AGAIN

    async def _self_check(self, requests: Sequence[pl.ProbeRequest]) -> tuple[str, ...]:
        results = await asyncio.gather(*(self.run_probe(r.addresses, r.kinds) for r in requests))
        before = self.state.self_check
        peers = [r.name for r in requests]
        verdicts = [combine(outcomes) for outcomes in results]
        self.state = pl.record_self_check(self.state, peers, verdicts, self.clock.monotonic())
        result = self.state.self_check.result if self.state.self_check else "skipped"
        self.metrics.set_self_check(result)
        if before is None or before.result != result:
            level = logging.WARNING if result == "failed" else logging.INFO
            log.log(level, "self-check %s (peers: %s)", result, ", ".join(peers))
        return AGAIN

    # ------------------------------------------------------------------ deletion
    async def _attempt(self, action: pl.DeleteAction) -> tuple[str, ...]:
        try:
            result = await Attempt(self, action).run()
        except asyncio.CancelledError:
            self.state = pl.record_attempt(self.state, action.uid, "aborted")
            raise
        except ke.ApiError as exc:
            log.warning(
                "deletion attempt stopped: %s", exc, extra=_node_kv(action.name, action.uid)
            )
            result = "aborted"
        self.state = pl.record_attempt(self.state, action.uid, result)
        self.metrics.deletions.labels(result).inc()
        if result == "deleted":
            self.metrics.deleted_by_source.labels(action.source).inc()
        cached = self.cache.get(action.name)
        if result in ("deleted", "gone") and cached is not None and cached.uid == action.uid:
            self.informer.forget(action.name)  # the watch's DELETED event may come later
        return () if result in TURNED_BACK else AGAIN

    async def _fence(self, action: pl.FenceAction) -> tuple[str, ...]:
        try:
            result = await FenceRequest(self, action).run()
        except asyncio.CancelledError:
            self.state = pl.record_fence(self.state, action.uid, "aborted")
            raise
        except ke.ApiError as exc:
            log.warning("power-off request stopped: %s", exc,
                        extra=_node_kv(action.name, action.uid))  # fmt: skip
            result = "aborted"
        self.state = pl.record_fence(self.state, action.uid, result)
        self.metrics.fences.labels(result).inc()
        return () if result in TURNED_BACK else AGAIN

    # The rest of `attempt.AttemptHost`.
    @property
    def breaker_open(self) -> bool:
        return self.state.breaker_open

    def episode(self, uid: str) -> Episode | None:
        return self.episodes.get(uid)

    def report_failure(self, action: pl.DeleteAction, error: str) -> None:
        self._failed, ok = admit(self._failed, action.uid, self.clock.monotonic())
        if ok:
            self._emit(action.uid, action.name, ev.DELETING_NODE_FAILED, error)

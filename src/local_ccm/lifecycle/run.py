"""The node-lifecycle-controller's loop.

While leading, a :class:`Controller` keeps the Nodes in an `Informer` cache of `NodeView`s.
Every watch change, finished probe or attempt, and every `--reconcile-interval`, it evaluates
the cache with the pure core (`assess` → `plan_deletions`) and performs the plan: Events,
probes and the self-check (tasks, so probing never blocks evaluation), deletion attempts.

One event loop, no locks: state is only changed by code running on it, between awaits.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from typing import Any

from local_ccm import names
from local_ccm.clock import Clock, unless_stopped
from local_ccm.kube import errors as ke
from local_ccm.kube.informer import Change, Informer, ListWatch, StreamEnd
from local_ccm.kube.nodes import NodeListWatch
from local_ccm.lifecycle.attempt import Attempt
from local_ccm.lifecycle.core import events as ev
from local_ccm.lifecycle.core import state as pl
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
from local_ccm.lifecycle.core.plan import plan_deletions
from local_ccm.lifecycle.health import Status
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.lifecycle.nodeapi import NodeApi, Obj
from local_ccm.lifecycle.probe import Prober
from local_ccm.logs import kv
from local_ccm.runtime.events import EventBudget, Reporter, admit, forget, node
from local_ccm.runtime.outbox import EventOutbox

log = logging.getLogger(__name__)

MIN_WAKE = 0.05


def _node_kv(name: str, uid: str, **more: object) -> dict[str, Any]:
    return kv(node=name, uid=uid, **more)


class Controller:
    """The leader's work for one leadership term: a new leader starts from a fresh LIST."""

    def __init__(
        self,
        config: pl.LoopConfig,
        api: NodeApi,
        prober: Prober,
        clock: Clock,
        *,
        metrics: LifecycleMetrics,
        status: Status,
        identity: str,
        rng: random.Random | None = None,
        may_write: Callable[[], bool] = lambda: True,
        write_timeout: float = 10.0,
        nodes: ListWatch | None = None,
    ) -> None:
        self.config, self.api, self.prober, self.clock = config, api, prober, clock
        self.metrics, self.status, self.identity = metrics, status, identity
        self.rng = rng or random.Random()
        self.may_write, self.write_timeout = may_write, write_timeout
        self.informer = Informer(
            nodes or NodeListWatch(api, config.selector), self.project, clock=clock, rng=self.rng,
            name="Nodes", on_end=self._stream_ended, on_watch=self._watching,
        )  # fmt: skip
        self.informer.add_handler(self._changed)
        self.episodes: dict[str, Episode] = {}
        self.state = pl.PipelineState()
        self._breaker_was_open = False  # for logging its transitions
        self.next_wake = config.interval
        self._annotation_keys = {p.key for p in config.scope.protected}
        self._wake = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}  # "probe/<uid>/<n>", "delete/...", ...
        self._task_ids = itertools.count()
        self.outbox = EventOutbox(
            api, clock, Reporter(names.LIFECYCLE, identity), namespace=config.event_namespace
        )
        self._failed = EventBudget()  # DeletingNodeFailed: once per 10 min per Node

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        watch = asyncio.create_task(self.informer.run(), name="node-watch")
        sender = asyncio.create_task(self.outbox.run(), name="events")
        try:
            synced = asyncio.create_task(self.informer.wait_synced())
            await asyncio.wait({watch, synced}, return_when=asyncio.FIRST_COMPLETED)
            synced.cancel()
            if watch.done():
                watch.result()  # the watch never ends on its own: surface why it did
            while True:
                self.evaluate()
                await unless_stopped(self.clock.sleep(self.next_wake), self._wake)
                self._wake.clear()
        finally:
            watch.cancel()
            sender.cancel()
            await self._shutdown()

    async def _shutdown(self) -> None:
        """Cancel probes; an in-flight DELETE may finish within its request timeout."""
        deletes = [t for key, t in self._tasks.items() if key.startswith("delete/")]
        for key, task in self._tasks.items():
            if not key.startswith("delete/"):
                task.cancel()
        if deletes:
            await asyncio.wait(deletes, timeout=self.write_timeout)
        for task in self._tasks.values():
            task.cancel()
        self.status.synced = False

    # ------------------------------------------------------------------ cache
    @property
    def cache(self) -> Mapping[str, NodeView]:
        return self.informer.cache

    def project(self, obj: Obj) -> NodeView:
        return project_node(obj, self._annotation_keys)

    def _watching(self) -> None:
        self.status.connected, self.status.disconnected_at = True, None

    def _stream_ended(self, end: StreamEnd) -> None:
        if end.reason == "stopped":
            return
        self.status.connected = False
        if self.status.disconnected_at is None:
            self.status.disconnected_at = self.clock.monotonic()
        self.metrics.watch_restarts.labels(self.metrics.controller, "nodes", end.reason).inc()

    def _changed(self, change: Change[NodeView]) -> None:
        if change.type == "SYNCED":
            self.status.synced = True
            self._wake.set()
        elif change.type in ("ADDED", "DELETED"):
            self._wake.set()
        elif change.type == "MODIFIED" and change.old is not None and change.new is not None:
            # A heartbeat changes only the resourceVersion: nothing to re-evaluate.
            old, new = change.old, change.new
            if replace(old, resource_version="") != replace(new, resource_version=""):
                self._wake.set()

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> pl.Plan:
        started, now = time.perf_counter(), self.clock.now()
        mono = self.clock.monotonic()
        nodes = tuple(self.cache.values())
        previous = self.episodes
        assessment = assess(nodes, self.config.scope, previous, now, self.config.timeout)
        self.episodes = dict(assessment.episodes.episodes)
        self._log_episodes(assessment, previous)
        state = pl.forget(self.state, assessment.episodes.ended)
        plan = plan_deletions(
            assessment, nodes=nodes, scope=self.config.scope, state=state,
            settings=self.config.settings, now=mono, rng=self.rng,
        )  # fmt: skip
        self.state = plan.state
        self._publish(assessment, plan)
        self._act(plan, mono)
        self.next_wake = self._next_wake(assessment)
        self.status.last_evaluation = self.clock.monotonic()
        self.metrics.evaluation.observe(time.perf_counter() - started)
        return plan

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

    def _act(self, plan: pl.Plan, now: float) -> None:
        for event in plan.events:
            self._emit(event.uid, event.name, event.reason, event.message)
        for _, reason in plan.skips:
            self.metrics.skipped.labels(reason).inc()
        for request in plan.probes:
            self._spawn(f"probe/{request.uid}", self._probe(request, now))
        if plan.self_check_probes:
            self._spawn("self-check", self._self_check(plan.self_check_probes))
        for action in plan.deletions:
            self._spawn(f"delete/{action.uid}", self._attempt(action))

    def _spawn(self, kind: str, work: Coroutine[Any, Any, None]) -> None:
        # Unique keys: a request is never dropped, or a record left "running" would wait for
        # a result forever; stale results are told apart by their start time instead.
        key = f"{kind}/{next(self._task_ids)}"
        task = asyncio.create_task(work, name=key)
        self._tasks[key] = task
        task.add_done_callback(lambda t: self._done(key, t))

    def _done(self, key: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", key, exc_info=task.exception())
        self._wake.set()

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

    async def _probe(self, request: pl.ProbeRequest, started: float) -> None:
        outcomes = await self.run_probe(request.addresses, request.kinds)
        record = self.state.probes.get(request.uid)
        if record is None or record.started != started:
            return  # the Node stopped being eligible meanwhile; a newer probe counts
        verdict = combine(outcomes)
        self.metrics.verdicts.labels(verdict).inc()
        before = self.state.probes.get(request.uid)
        level = logging.INFO if before is None or before.verdict != verdict else logging.DEBUG
        fields = _node_kv(request.name, request.uid, verdict=verdict)
        log.log(level, "probe verdict %s: %s", verdict, summarize(outcomes), extra=fields)
        self.state = pl.record_probe(self.state, request.uid, outcomes, self.clock.monotonic())

    async def _self_check(self, requests: Sequence[pl.ProbeRequest]) -> None:
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

    # ------------------------------------------------------------------ deletion
    async def _attempt(self, action: pl.DeleteAction) -> None:
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
        cached = self.cache.get(action.name)
        if result in ("deleted", "gone") and cached is not None and cached.uid == action.uid:
            self.informer.forget(action.name)  # the watch's DELETED event may come later

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

"""The node-lifecycle-controller's loop (spec/lifecycle.md §5.4, §6, §7, §8, §9).

While leading, a :class:`Controller` LISTs the Nodes once, then WATCHes them into a cache of
`NodeView` projections (§8; no periodic LIST). Every watch change, finished probe or attempt,
and every `--reconcile-interval`, it evaluates the cache with the pure core
(`health.assess` → `plan.plan_deletions`) and performs the plan: Events, probes (independent
tasks, so probing never blocks evaluation), the self-check, and deletion attempts (fresh GET,
re-check, optional out-of-service taint, DELETE with uid + resourceVersion preconditions).
Results flow back through `record_probe`, `record_self_check` and `record_attempt`.

One event loop, no locks: state is only changed by code running on it, between awaits.
Time comes from an injected `Clock`, the API from a `NodeApi`, probes from a `Prober`, so
unit tests drive the loop with fakes and never sleep.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from local_ccm.clock import Clock
from local_ccm.kube import errors as ke
from local_ccm.kube.backoff import Backoff
from local_ccm.leader import LeaderContext, LeaderElector, LeadershipLost
from local_ccm.lifecycle import events as ev
from local_ccm.lifecycle import plan as pl
from local_ccm.lifecycle.health import Assessment, Episode, Scope, assess, eligible_at, recheck
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.lifecycle.model import (
    IPAddress,
    NodeView,
    ProbeKind,
    ProbeOutcome,
    combine,
    format_time,
    project_node,
    summarize,
)
from local_ccm.lifecycle.nodeapi import NodeApi, NodeEvent, Obj
from local_ccm.lifecycle.outofservice import plan_out_of_service
from local_ccm.lifecycle.probe import Prober
from local_ccm.logs import kv
from local_ccm.serve import Checks

log = logging.getLogger(__name__)

WATCH_BACKOFF = Backoff(initial=0.5, factor=2.0, cap=30.0, jitter=0.2)  # §8.1
WATCHDOG_TICK = 1.0
WATCHDOG_LIMIT = 10.0  # §9.3: /healthz fails when the loop has not ticked for this long
MIN_WAKE = 0.05
EXIT_OK, EXIT_LEADERSHIP = 0, 3


@dataclass(frozen=True)
class LoopConfig:
    """What the loop needs from the command line; durations in seconds."""

    scope: Scope
    settings: pl.PipelineSettings
    timeout: float  # --not-ready-timeout
    selector: str | None = None  # server-side labelSelector of the watch (--node-selector)
    event_namespace: str = "default"
    out_of_service_timeout: float = 300.0

    @property
    def interval(self) -> float:
        return self.settings.interval


@dataclass
class Status:
    """Plain values the health checks read from the HTTP server's thread (§9.3)."""

    leading: bool = False
    synced: bool = False
    connected: bool = False
    disconnected_at: float | None = None
    last_evaluation: float | None = None
    last_tick: float | None = None


def health_checks(status: Status, clock: Clock, interval: float) -> tuple[Checks, Checks]:
    """(/healthz, /readyz) of §9.3. API outages fail readiness, never liveness."""
    healthz, readyz = Checks(), Checks()

    def loop_alive() -> tuple[bool, str]:
        tick = status.last_tick
        ok = tick is not None and clock.monotonic() - tick < WATCHDOG_LIMIT
        return ok, "" if ok else "the event loop has not ticked for 10s"

    def evaluating() -> tuple[bool, str]:
        limit = max(3 * interval, 60.0)
        last = status.last_evaluation
        if not status.leading or not status.synced or last is None:
            return True, ""
        ok = clock.monotonic() - last < limit
        return ok, "" if ok else f"no evaluation completed within {limit:g}s"

    def node_cache() -> tuple[bool, str]:
        if not status.leading:
            return True, ""  # a standing-by candidate is ready
        if not status.synced:
            return False, "the Node cache is not synced"
        gone = status.disconnected_at
        if status.connected or gone is None or clock.monotonic() - gone < 2 * interval:
            return True, ""
        return False, "the Node watch is disconnected"

    healthz.add("loop", loop_alive)
    healthz.add("evaluation", evaluating)
    readyz.add("config", lambda: (True, ""))
    readyz.add("node-cache", node_cache)
    return healthz, readyz


def leader_callback(status: Status, metrics: LifecycleMetrics) -> Callable[[bool], None]:
    def changed(leading: bool) -> None:
        status.leading = leading
        metrics.leader.set(1 if leading else 0)
        if leading:
            metrics.transitions.inc()
        else:
            status.synced = False

    return changed


def _always() -> bool:
    return True


def _node_kv(name: str, uid: str, **more: object) -> dict[str, Any]:
    return kv(node=name, uid=uid, **more)


class Controller:
    """The leader's work for one leadership term: a new leader starts from a fresh LIST."""

    def __init__(
        self,
        config: LoopConfig,
        api: NodeApi,
        prober: Prober,
        clock: Clock,
        *,
        metrics: LifecycleMetrics,
        status: Status,
        identity: str,
        rng: random.Random | None = None,
        may_write: Callable[[], bool] = _always,
        write_timeout: float = 10.0,
    ) -> None:
        self.config, self.api, self.prober, self.clock = config, api, prober, clock
        self.metrics, self.status, self.identity = metrics, status, identity
        self.rng = rng or random.Random()
        self.may_write, self.write_timeout = may_write, write_timeout
        self.cache: dict[str, NodeView] = {}
        self.episodes: dict[str, Episode] = {}
        self.state = pl.PipelineState()
        self.breaker_open = False
        self.next_wake = config.interval
        self._annotation_keys = {p.key for p in config.scope.protected}
        self._wake = asyncio.Event()
        self._synced = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}  # "probe/<uid>/<n>", "delete/...", ...
        self._task_ids = itertools.count()
        self._events: set[asyncio.Task[None]] = set()
        self._failed_sent: dict[str, float] = {}

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        watch = asyncio.create_task(self.watch(), name="node-watch")
        try:
            synced = asyncio.create_task(self._synced.wait())
            await asyncio.wait({watch, synced}, return_when=asyncio.FIRST_COMPLETED)
            synced.cancel()
            if watch.done():
                watch.result()  # the watch never ends on its own: surface why it did
            while True:
                self.evaluate()
                await self._sleep(self.next_wake)
        finally:
            watch.cancel()
            await self._shutdown()

    async def _sleep(self, seconds: float) -> None:
        sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            woken.cancel()
        self._wake.clear()

    async def _shutdown(self) -> None:
        """§7.5: cancel probes; an in-flight DELETE may finish within its request timeout."""
        deletes = [t for key, t in self._tasks.items() if key.startswith("delete/")]
        for key, task in self._tasks.items():
            if not key.startswith("delete/"):
                task.cancel()
        if deletes:
            await asyncio.wait(deletes, timeout=self.write_timeout)
        for task in [*self._tasks.values(), *self._events]:
            task.cancel()
        self.status.synced = False

    # ------------------------------------------------------------------ cache (§8)
    async def watch(self) -> None:
        """LIST, then WATCH from its resourceVersion; re-watch from the last seen one after a
        disconnect, re-LIST (replacing the cache atomically) after 410 Gone."""
        failures, version, need_list = 0, "", True
        while True:
            reason, retry_after, delivered = "closed", None, False
            try:
                if need_list:
                    listed = await self.api.list_nodes(self.config.selector)
                    self.replace(listed.items)
                    version, need_list = listed.resource_version, False
                self.status.connected, self.status.disconnected_at = True, None
                async for event in self.api.watch_nodes(self.config.selector, version):
                    delivered, failures = True, 0
                    version = event.resource_version or version
                    self.apply(event)
            except ke.Gone:
                reason, need_list = "gone", True
                log.info("Node watch expired; relisting")
            except ke.ApiError as exc:
                reason, retry_after = "error", exc.retry_after
                log.warning("Node watch failed: %s", exc)
            self._disconnected(reason)
            if reason == "error" or (reason == "closed" and not delivered):
                await self.clock.sleep(WATCH_BACKOFF.next_delay(failures, retry_after, self.rng))
                failures += 1

    def _disconnected(self, reason: str) -> None:
        self.status.connected = False
        if self.status.disconnected_at is None:
            self.status.disconnected_at = self.clock.monotonic()
        self.metrics.watch_restarts.labels(reason).inc()

    def project(self, obj: Obj) -> NodeView:
        return project_node(obj, self._annotation_keys)

    def replace(self, items: Iterable[Obj]) -> None:
        views = (self.project(obj) for obj in items)
        self.cache = {view.name: view for view in views}
        self._synced.set()
        self.status.synced = True
        self._wake.set()

    def apply(self, event: NodeEvent) -> None:
        if event.type not in ("ADDED", "MODIFIED", "DELETED"):
            return  # BOOKMARK only moves the resourceVersion
        view = self.project(event.node)
        old = self.cache.get(view.name)
        if event.type == "DELETED":
            if old is not None and old.uid == view.uid:
                del self.cache[view.name]
                self._wake.set()
            return
        self.cache[view.name] = view
        # A heartbeat changes only the resourceVersion: nothing to re-evaluate.
        if old is None or replace(old, resource_version="") != replace(view, resource_version=""):
            self._wake.set()

    # ------------------------------------------------------------------ evaluation (§6.1)
    def evaluate(self) -> pl.Plan:
        started, now = time.perf_counter(), self.clock.now()
        mono = self.clock.monotonic()
        nodes = tuple(self.cache.values())
        previous = self.episodes
        assessment = assess(nodes, self.config.scope, previous, now, self.config.timeout)
        self.episodes = dict(assessment.episodes.episodes)
        self._log_episodes(assessment, previous)
        state = pl.forget(self.state, assessment.episodes.ended)
        plan = pl.plan_deletions(
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
            self._failed_sent.pop(uid, None)
            name = previous[uid].name if uid in previous else ""
            log.info("NotReady episode ended", extra=_node_kv(name, uid))

    def _next_wake(self, assessment: Assessment) -> float:
        """The interval, or sooner when a waiting Node reaches the timeout (§8.3)."""
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
        if plan.breaker.open != self.breaker_open:
            level = logging.WARNING if plan.breaker.open else logging.INFO
            state = "open: nothing is deleted" if plan.breaker.open else "closed"
            log.log(level, "circuit breaker %s (%s)", state, plan.breaker)
            self.breaker_open = plan.breaker.open
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

    # ------------------------------------------------------------------ Events (§9.1)
    def _emit(self, uid: str, name: str, reason: str, message: str) -> None:
        body = ev.event_body(
            reason=reason, message=message, node_name=name, node_uid=uid,
            namespace=self.config.event_namespace, identity=self.identity, now=self.clock.now(),
        )  # fmt: skip
        task = asyncio.create_task(self._send_event(body, name, uid))
        self._events.add(task)
        task.add_done_callback(self._events.discard)

    def _announce(self, uid: str, name: str, reason: str, message: str) -> None:
        """Loop-side Events, also at most once per (uid, reason) per episode."""
        if (uid, reason) not in self.state.announced:
            self.state = replace(self.state, announced=self.state.announced | {(uid, reason)})
            self._emit(uid, name, reason, message)

    async def _send_event(self, body: Obj, name: str, uid: str) -> None:
        try:
            await self.api.create_event(self.config.event_namespace, body)
        except ke.ApiError as exc:
            log.warning("Event %s not sent: %s", body["reason"], exc, extra=_node_kv(name, uid))

    # ------------------------------------------------------------------ probes (§5.4, §6.3)
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
            return  # §5.4.3: the Node stopped being eligible meanwhile; a newer probe counts
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

    # ------------------------------------------------------------------ deletion (§6.5-§6.7)
    async def _attempt(self, action: pl.DeleteAction) -> None:
        try:
            result = await self._delete_flow(action)
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
            del self.cache[action.name]  # the watch's DELETED event may come later

    async def _delete_flow(self, action: pl.DeleteAction) -> pl.AttemptResult:
        fresh = await self._fresh(action)
        if isinstance(fresh, str):
            return fresh
        if action.out_of_service:
            fresh = await self._out_of_service(action, fresh)
            if isinstance(fresh, str):
                return fresh
        if action.dry_run:
            return await self._dry_run(action, fresh)
        return await self._delete(action, fresh)

    async def _fresh(self, action: pl.DeleteAction) -> Obj | pl.AttemptResult:
        """§6.5.1-2: a quorum GET and the re-check of steps 1-2 on it."""
        try:
            obj: Obj | None = await self.api.get_node(action.name)
        except ke.NotFound:
            obj = None
        abort = recheck(
            None if obj is None else self.project(obj), action.uid, self.config.scope,
            episode=self.episodes.get(action.uid), now=self.clock.now(),
            timeout=self.config.timeout, breaker_open=self.state.breaker_open,
        )  # fmt: skip
        if abort is None and obj is not None:
            return obj
        check = abort.check if abort else "the Node no longer exists"
        log.info("deletion aborted: %s", check, extra=_node_kv(action.name, action.uid))
        if abort is not None and abort.result == "aborted":
            self._announce(action.uid, action.name, pl.DELETION_ABORTED, check)
            return "aborted"
        return "gone"

    async def _delete(self, action: pl.DeleteAction, fresh: Obj) -> pl.AttemptResult:
        fields = _node_kv(action.name, action.uid)
        if not self.may_write():  # §7.7: the lease is too old for a write to land safely
            log.warning("not deleting: the leader lease is not fresh", extra=fields)
            return "aborted"
        message = (
            f"deleting Node {action.name} (uid {action.uid}): NotReady since "
            f"{format_time(action.t0)} ({action.age:.0f}s); probes: {action.summary}"
        )
        self._announce(action.uid, action.name, pl.DELETING_NODE, message)
        try:
            await self._send_delete(action.name, fresh, dry_run=False)
        except ke.Conflict as exc:
            log.info("delete precondition failed: %s", exc.message, extra=fields)
            return "precondition_failed"
        except ke.NotFound:
            return "gone"
        except ke.ApiError as exc:
            log.warning("deleting the Node failed: %s", exc, extra=fields)
            self._failed(action, str(exc))
            return "failed"
        log.info("deleted Node: %s", message, extra=fields)
        return "deleted"

    async def _send_delete(self, name: str, fresh: Obj, *, dry_run: bool) -> None:
        """§6.5.3: preconditions from the fresh object, so a changed Node answers 409."""
        meta = fresh["metadata"]
        await self.api.delete_node(
            name, uid=meta["uid"], resource_version=meta["resourceVersion"], dry_run=dry_run
        )

    def _failed(self, action: pl.DeleteAction, error: str) -> None:
        now = self.clock.monotonic()
        if ev.may_repeat_failure(self._failed_sent.get(action.uid), now):
            self._failed_sent[action.uid] = now
            self._emit(action.uid, action.name, pl.DELETING_NODE_FAILED, error)

    async def _dry_run(self, action: pl.DeleteAction, fresh: Obj) -> pl.AttemptResult:
        """§6.7: the same DELETE with dryRun=All exercises RBAC and preconditions."""
        fields = _node_kv(action.name, action.uid)
        try:
            await self._send_delete(action.name, fresh, dry_run=True)
        except ke.Conflict:
            return "precondition_failed"
        except ke.NotFound:
            return "gone"
        except ke.ApiError as exc:
            log.warning("dry-run DELETE failed: %s", exc, extra=fields)
            return "failed"
        message = pl.dry_run_message(action)
        log.info("%s", message, extra=fields)
        self._announce(action.uid, action.name, pl.DRY_RUN_EVENT, message)
        return "dry_run"

    async def _out_of_service(self, action: pl.DeleteAction, fresh: Obj) -> Obj | pl.AttemptResult:
        """§6.6: taint, wait for VolumeAttachments (or the timeout), re-read, then delete;
        untaint and end the attempt when the Node recovers meanwhile."""
        obj, recovered, changed = fresh, False, False
        fields = _node_kv(action.name, action.uid)
        while True:
            attachments = (
                0 if action.dry_run else await self.api.count_volume_attachments(action.name)
            )
            step = plan_out_of_service(
                obj, now=self.clock.now(), attachments=attachments, recovered=recovered,
                timeout=self.config.out_of_service_timeout, dry_run=action.dry_run,
            )  # fmt: skip
            if step.step == "delete":
                if step.would_taint:
                    log.info("[DRY-RUN] would add the out-of-service taint", extra=fields)
                return await self._fresh(action) if changed else obj
            if step.step in ("taint", "remove"):
                if not self.may_write():
                    return "aborted"
                try:
                    obj = await self.api.patch_node(action.name, step.patch)
                except ke.Conflict:
                    return "precondition_failed"
                reason = (
                    pl.OUT_OF_SERVICE_ADDED if step.step == "taint" else pl.OUT_OF_SERVICE_REMOVED
                )
                log.info("%s", reason, extra=fields)
                self._announce(
                    action.uid, action.name, reason, f"{attachments} VolumeAttachment(s)"
                )
                if step.step == "remove":
                    return "aborted"
                changed = True
                continue
            if step.step == "end":
                return "aborted"
            waited = await self._wait_out_of_service(action)
            if isinstance(waited, str):
                return waited
            obj, recovered, changed = waited[0], waited[1], True

    async def _wait_out_of_service(
        self, action: pl.DeleteAction
    ) -> tuple[Obj, bool] | pl.AttemptResult:
        """One interval of the wait: re-read, and probe again (a reply means recovered)."""
        await self.clock.sleep(self.config.interval)
        try:
            obj = await self.api.get_node(action.name)
        except ke.NotFound:
            return "gone"
        view = self.project(obj)
        if view.uid != action.uid:
            return "aborted"
        if view.ready == "True":
            return obj, True
        if await self.api.count_volume_attachments(action.name) == 0:
            return obj, False  # about to delete: no need to wait for a probe
        addresses = self.config.settings.addresses(view)
        if self.config.settings.unprobed or not addresses:
            return obj, False
        outcomes = await self.run_probe(addresses, self.config.settings.kinds)
        return obj, combine(outcomes) == "reachable"


# ------------------------------------------------------------------ the process (§7)
ControllerFactory = Callable[[LeaderContext | None], Controller]


async def run_controller(
    make: ControllerFactory,
    clock: Clock,
    status: Status,
    *,
    elector: LeaderElector | None,
    stop: asyncio.Event,
) -> int:
    """Run until `stop` (exit 0, lease released) or leadership is lost (exit 3). Without an
    elector the controller acts at once (--leader-elect=false)."""
    watchdog = asyncio.create_task(_watchdog(status, clock), name="watchdog")
    try:
        if elector is None:
            await _until_stopped(asyncio.ensure_future(make(None).run()), stop)
            return EXIT_OK

        async def lead(context: LeaderContext) -> None:
            await make(context).run()

        campaign = asyncio.ensure_future(elector.run(lead))
        try:
            await _until_stopped(campaign, stop, on_stop=elector.stop)
        except LeadershipLost as exc:
            log.error("leadership lost: %s; exiting", exc)
            return EXIT_LEADERSHIP
        return EXIT_OK
    finally:
        watchdog.cancel()


async def _until_stopped(
    work: asyncio.Future[None], stop: asyncio.Event, on_stop: Callable[[], None] | None = None
) -> None:
    """Wait for `work`; on `stop`, ask it to stop (or cancel it) and wait for it to end."""
    stopper = asyncio.ensure_future(stop.wait())
    waiting: set[asyncio.Future[Any]] = {work, stopper}
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if not work.done():
        log.info("stopping")
        if on_stop is not None:
            on_stop()
        else:
            work.cancel()
    try:
        await work
    except asyncio.CancelledError:
        if not stop.is_set():
            raise


async def _watchdog(status: Status, clock: Clock) -> None:
    while True:
        status.last_tick = clock.monotonic()
        await clock.sleep(WATCHDOG_TICK)

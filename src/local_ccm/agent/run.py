"""The agent's loop: watch (its one Node, netlink, timers) -> key (its one Node) -> sync ->
decide -> one write -> feed back, on the controller kit: `Agent` is a
`runtime.controller.Controller` with one key, run by `runtime.worker.Worker` as the central
controllers are; and run-once.

A sync waits for a burst of triggers to end (`triggers.Burst`), then runs a pass: it detects,
asks ``core.decide`` what to do with the cached Node, applies the one write a decision holds,
records the API's answer in the memory and feeds the Node the API returned (or, after a
conflict, a fresh LIST) back into ``decide``, until a decision holds no write; a decision's
retry time is the sync's `RequeueAfter`. Events, log lines and metric values are the
decision's; this module only applies them.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import replace
from typing import Any

from local_ccm import names
from local_ccm.agent import api as na
from local_ccm.agent.core import events as ev
from local_ccm.agent.core.candidates import Detected
from local_ccm.agent.core.config import AgentConfig, LoopSettings
from local_ccm.agent.core.decide import (
    Decision,
    Gauges,
    Memory,
    Now,
    Refusal,
    RefusalKind,
    Setup,
    Write,
    decide,
    unmet_run_once,
)
from local_ccm.agent.core.timing import API_BACKOFF
from local_ccm.agent.core.writes import plan_addresses
from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.nodecache import NodeCache, PreconditionError
from local_ccm.agent.nodemetadata import NodeMetadata
from local_ccm.agent.providerid import ProviderIdSource, fetch_provider_id
from local_ccm.agent.triggers import Burst, ChangeSource, Health, KernelSource
from local_ccm.clock import Clock, SystemClock
from local_ccm.kube import errors as ke
from local_ccm.logs import V2, V3, kv
from local_ccm.netlink import Change
from local_ccm.runtime import controller as rc
from local_ccm.runtime.events import EventSpec, Reporter, Subject
from local_ccm.runtime.outbox import EventOutbox
from local_ccm.runtime.timer import Timer
from local_ccm.runtime.worker import Worker

__all__ = [
    "EXIT_FAILED", "EXIT_OK", "EXIT_PRECONDITION", "RUN_ONCE_DEADLINE",
    "RUN_ONCE_TRANSIENT_RETRIES", "Agent", "ChangeSource", "DetectFn", "Detected",
    "LoopSettings", "PreconditionError", "permissions",
]  # fmt: skip

log = logging.getLogger(__name__)
DetectFn = Callable[[], Awaitable[Detected]]
Obj = dict[str, Any]

RUN_ONCE_TRANSIENT_RETRIES = 3
RUN_ONCE_DEADLINE = 60.0
MAX_WRITES_PER_PASS = 16  # a guard: a pass needs at most 3 writes and 4 conflict re-reads
EXIT_OK, EXIT_FAILED, EXIT_PRECONDITION = 0, 1, 4


def permissions(event_namespace: str) -> list[rc.Permission]:
    """What the agent needs; missing any of it is exit 4."""
    return [
        rc.Permission("", "nodes", ("get", "list", "watch", "patch")),
        rc.Permission("", "nodes/status", ("patch",)),
        rc.Permission("", "events", ("create",), namespace=event_namespace),
    ]


NETLINK_KINDS = {"address": "addr", "resync": "overflow"}  # Change.kind -> metric label
LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR, "detail": V2}
WRITE_RESULTS = {"conflict": "conflict", "invalid": "invalid", "forbidden": "forbidden"}
REFUSALS: dict[str, RefusalKind] = {k: k for k in ("conflict", "invalid", "forbidden", "not_found")}


class Agent:
    """The agent for one Node: the controller the kit runs (one key, its Node), its passes,
    health and memory."""

    def __init__(
        self,
        settings: LoopSettings,
        config: AgentConfig,
        api: na.NodeApi,
        detect: DetectFn,
        *,
        clock: Clock | None = None,
        metrics: AgentMetrics | None = None,
        changes: ChangeSource | None = None,
        rng: random.Random | None = None,
        provider_ids: ProviderIdSource | None = None,
        metadata: NodeMetadata | None = None,
    ) -> None:
        self.settings, self.config, self.api, self.detect = settings, config, api, detect
        self.changes, self.provider_ids, self.metadata = changes, provider_ids, metadata
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics or AgentMetrics()
        self.rng = rng or random.Random()
        self.node_name = name = settings.node_name
        self._log = logging.LoggerAdapter(log, kv(node=name))
        self.health = Health(self.clock, max(3 * settings.reconcile_interval, 60.0))
        self.burst = Burst(self.clock, settings.debounce_quiet, settings.debounce_max)
        self.events = EventOutbox(
            api, self.clock, Reporter(names.AGENT, name, host=name),
            namespace=settings.event_namespace, budget=ev.budget(),
        )  # fmt: skip
        self.cache = NodeCache(
            api, name, clock=self.clock, rng=self.rng, metrics=self.metrics, health=self.health,
            timeout=settings.api_timeout,
        )  # fmt: skip
        self.memory = Memory()
        self.fetched_provider_id: str | None = None
        self.last_error: ke.ApiError | None = None  # of the last pass that failed
        self.retry_in: float | None = None  # the last decision's wish to look again
        self.in_pass = False

    # -------------------------------------------------------------- loop mode
    async def run_loop(self) -> int:
        """Run on the kit until cancelled: the sources (netlink first, so no address change
        during start-up is missed; the Node's start-up read; the timers), then the first pass
        and one pass per burst. Returns only for a failed precondition (exit 4). The access
        review is the process runtime's."""
        first, cap = API_BACKOFF.initial, API_BACKOFF.cap
        worker = Worker(self, clock=self.clock, backoff=(first, cap))
        try:
            await worker.run()
        except PreconditionError as exc:
            print(f"{names.AGENT}: {exc}", file=sys.stderr)
            self._log.error("start-up precondition failed: %s", exc)
            return EXIT_PRECONDITION
        return EXIT_FAILED  # not reached: the worker runs until cancelled or raises

    # -------------------------------------------------------------- the controller contract
    @property
    def name(self) -> str:
        return names.AGENT

    @property
    def permissions(self) -> Sequence[rc.Permission]:
        return permissions(self.settings.event_namespace)

    def watches(self) -> Sequence[rc.Watch]:
        def resync_interval() -> float:
            return self.settings.resync_interval * (0.9 + 0.2 * self.rng.random())  # ±10 %

        sources: list[rc.Source] = [
            self.cache,
            Timer("tick", lambda: self.settings.reconcile_interval, self.clock),
            Timer("resync", resync_interval, self.clock),
        ]
        if self.changes is not None:
            kernel = KernelSource(self.changes, self.clock, self.rng, self._count, self._log)
            sources.insert(0, kernel)
        return [rc.Watch(source, self._triggered) for source in sources]

    def _triggered(self, kind: str) -> list[str]:
        self.burst.add(kind)
        return [self.node_name]

    def _count(self, batch: Sequence[Change]) -> None:
        for change in batch:
            self.metrics.netlink_events.labels(NETLINK_KINDS.get(change.kind, change.kind)).inc()

    def synced(self) -> list[str]:
        return [self.node_name]

    def beside(self, fence: rc.Fence) -> list[Coroutine[Any, Any, None]]:
        return [self.events.run()]  # Events only report: not fenced (and nothing leads)

    async def sync(self, key: str) -> rc.Result:
        """The first sync: the provider ID, then the start-up pass. Later ones: a pass once
        the burst of triggers is over; the decision's retry time is the next look."""
        if not self.health.first_pass:
            await self._fetch_provider_id()
            self.burst.take()
            await self.run_pass(["startup"])
            self.health.first_pass = True
        elif (wait := self.burst.wait()) > 0:
            return rc.RequeueAfter(wait)
        else:
            await self.run_pass(self.burst.take() or ["retry"])
        return rc.DONE if self.retry_in is None else rc.RequeueAfter(self.retry_in)

    def subject(self, key: str) -> Subject | None:
        node = self.cache.node
        return None if node is None else ev.about(node)

    def emit(self, spec: EventSpec, subject: Subject) -> None:
        self.events.emit(spec, subject)

    def ready(self) -> tuple[bool, str]:
        return self.health.first_pass_ok()

    async def _fetch_provider_id(self) -> None:
        """Once per process, before the first pass (which then sets it with the taint
        removal); a missing or failing metadata service blocks nothing."""
        if self.provider_ids is None or self.settings.provider_id:
            return
        attempts = await fetch_provider_id(self.provider_ids, self.clock, self.rng, self.node_name)
        self.fetched_provider_id = attempts.value

    # -------------------------------------------------------------- one pass
    async def run_pass(self, triggers: Sequence[str]) -> str:
        """Detect, then decide and write until a decision holds no write; returns the outcome
        label of ``passes_total``."""
        self.in_pass = True
        start = self.clock.monotonic()
        try:
            outcome = await self._pass()
        finally:
            self.in_pass = False
        self.metrics.passes.labels(triggers[0], outcome).inc()
        self.metrics.pass_duration.observe(self.clock.monotonic() - start)
        self.health.last_pass = self.clock.monotonic()
        self._log.log(V3, "pass trigger=%s outcome=%s", triggers[0], outcome)
        return outcome

    async def _pass(self) -> str:
        refused: ke.ApiError | None = None
        self.retry_in = None
        detected = await self.detect()
        self.metrics.observe_detections(detected)
        node = self.cache.node
        setup = self._setup(node)
        for _ in range(MAX_WRITES_PER_PASS):
            decision = decide(node, detected, self.memory, setup, self._now())
            self.memory = decision.memory
            self._apply(decision, node)
            if decision.write is None:
                outcome = decision.outcome or "noop"
                failed = outcome == "failed" or isinstance(refused, ke.NotFound)
                self.last_error = refused if failed else None
                return outcome
            node, refused = await self._send(decision.write)
        self._log.error("a pass decided %d writes; ending it", MAX_WRITES_PER_PASS)
        return "failed"

    def _setup(self, node: Obj | None) -> Setup:
        labels = None
        if self.metadata is not None and node is not None:
            labels = self.metadata.setup(lambda spec: self._emit(spec, node))
        return Setup(
            self.config, provider_id=self.settings.provider_id,
            fetched_provider_id=self.fetched_provider_id, settle_time=self.settings.settle_time,
            labels=labels,
        )  # fmt: skip

    def _now(self) -> Now:
        return Now(self.clock.monotonic(), self.clock.now(), self.rng.random())

    async def _send(self, write: Write) -> tuple[Obj | None, ke.ApiError | None]:
        """One PATCH; the Node it stored (or a fresh read after a conflict) goes back to
        ``decide`` with the answer."""
        patch = write.patch
        self._log.debug("PATCH %s %s", patch.subresource or "node", patch.body())
        try:
            new = await self.api.patch_node(
                self.node_name, patch.body(), subresource=patch.subresource
            )
        except ke.ApiError as exc:
            for kind in write.kinds:
                self.metrics.writes.labels(kind, WRITE_RESULTS.get(exc.kind, "error")).inc()
            return await self._refused(exc)
        for kind in write.kinds:
            self.metrics.writes.labels(kind, "success").inc()
        self.cache.put(new)
        self.memory = self.memory.answered(None)
        return new, None

    async def _refused(self, exc: ke.ApiError) -> tuple[Obj | None, ke.ApiError]:
        if isinstance(exc, ke.NotFound):
            self.cache.gone()
        elif isinstance(exc, ke.Conflict):
            try:
                await self.cache.relist()  # re-read and recompute from scratch; never resend
            except ke.ApiError as again:
                exc = again
        kind = REFUSALS.get(exc.kind, "error")
        self.memory = self.memory.answered(Refusal(kind, exc.message, exc.retry_after))
        return self.cache.node, exc

    def _apply(self, decision: Decision, node: Obj | None) -> None:
        """A decision's log lines, Events, metric values and retry timer."""
        for level, message in decision.logs:
            self._log.log(LEVELS[level], "%s", message)
        for spec in decision.events:
            self._emit(spec, node)
        for spec in decision.reported:  # logged when sent, so as often as the Event
            if self._emit(spec, node) and spec.type == "Warning":
                self._log.warning("%s: %s", spec.reason, spec.message)
        self._observe(decision.gauges)
        if decision.retry_in is not None:
            self.retry_in = decision.retry_in
        self.health.forbidden = decision.memory.forbidden

    def _observe(self, gauges: Gauges) -> None:
        m = self.metrics
        for reason, value in (gauges.blocked or {}).items():
            m.blocked.labels(reason).set(value)
        for family, value in (gauges.mismatch or {}).items():
            m.mismatch.labels(family).set(value)
        if gauges.conflict is not None:
            m.conflict.set(gauges.conflict)
        for address_type, ip_family, address in gauges.kept:
            m.observe_kept(address_type, ip_family, address)
        if gauges.reverts:
            m.reverts.inc(gauges.reverts)
        if gauges.synced_at is not None:
            m.last_sync.set(gauges.synced_at)
        if gauges.taint_delay is not None:
            m.taint_delay.observe(gauges.taint_delay)

    def _emit(self, spec: EventSpec, node: Obj | None) -> bool:
        return node is not None and self.events.emit(spec, ev.about(node))

    # -------------------------------------------------------------- run-once
    async def run_once(self) -> int:
        """Run-once mode: one full pass with bounded retries, then exit 0 or 1."""
        try:
            return await asyncio.wait_for(self._once(), RUN_ONCE_DEADLINE)
        except TimeoutError:
            print(
                f"{names.AGENT}: run-once: no final state within {RUN_ONCE_DEADLINE:.0f}s",
                file=sys.stderr,
            )
            return EXIT_FAILED

    async def _once(self) -> int:
        await self._fetch_provider_id()
        for attempt in range(RUN_ONCE_TRANSIENT_RETRIES + 1):
            try:
                await self.cache.relist()
            except ke.ApiError as exc:
                self.last_error = exc
            else:
                if self.cache.node is None:
                    print(f"{names.AGENT}: Node {self.node_name} not found", file=sys.stderr)
                    return EXIT_FAILED
                self.memory = replace(self.memory, retry_at=0.0)  # run-once keeps its own count
                await self.run_pass(["startup"])
            error = self.last_error
            if not isinstance(error, ke.Transient | ke.Conflict):
                break
            await self.clock.sleep(API_BACKOFF.next_delay(attempt, error.retry_after, self.rng))
        await self.events.flush(5.0)
        return self._verdict()

    def _verdict(self) -> int:
        node, detected, error = self.cache.node, self.memory.detected, self.last_error
        if node is None or detected is None:
            reason = error.message if error else "Node not read"
            print(f"{names.AGENT}: run-once failed: {reason}", file=sys.stderr)
            return EXIT_FAILED
        plan = plan_addresses(node, detected, self.config)
        provider_id = self.settings.provider_id or self.fetched_provider_id or ""
        unmet = unmet_run_once(node, plan, detected, self.config, provider_id)
        for item in unmet:
            print(f"{names.AGENT}: unmet: {item}", file=sys.stderr)
        if error is not None and unmet:
            print(f"{names.AGENT}: last error: {error.message}", file=sys.stderr)
        return EXIT_FAILED if unmet else EXIT_OK

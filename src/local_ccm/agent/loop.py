"""The agent's state for one Node and its pass.

One pass = detect (netlink only) -> compute (pure, ``agent.plan``) -> compare with the cached
Node -> status PATCH if needed -> taint / provider-ID PATCH -> Events and metrics.
Steady state costs no API request per tick: the Node is cached from one watch.
Time comes from an injected :class:`Clock`, the API from a :class:`NodeApi`, detection from
an async callable, so unit tests drive the whole loop with fakes. The long-running jobs
(netlink, timers) and the two modes are in ``agent.tasks``; the Node's watch is an Informer.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from local_ccm import names
from local_ccm.agent import tasks
from local_ccm.agent.core import events as ev
from local_ccm.agent.core.addresses import AddressPlan
from local_ccm.agent.core.candidates import Detection, DetectorKey
from local_ccm.agent.core.config import INTERNAL, AgentConfig, family_name
from local_ccm.agent.core.passes import (
    current_addresses,
    is_older,
    node_rv,
    node_uid,
)
from local_ccm.agent.core.plan import (
    FightState,
    addresses_match,
    advise_no_internal_ip,
    fight_observe,
    fight_tick,
    is_tainted,
    last_address_writer,
    plan_addresses,
)
from local_ccm.agent.core.timing import (
    API_BACKOFF,
    MAX_CONFLICTS,
    NO_INTERNAL_IP_WARNING_EVERY,
    is_due,
)
from local_ccm.agent.metrics import BLOCK_REASONS, AgentMetrics
from local_ccm.agent.nodeapi import (
    INFORMER_ERRORS,
    ConflictError,
    ForbiddenError,
    InvalidError,
    NodeApi,
    NodeApiError,
    NotFoundError,
    OwnNode,
)
from local_ccm.agent.providerid import ProviderIdSource
from local_ccm.agent.triggers import Health, Triggers
from local_ccm.agent.writes import NodeWrites
from local_ccm.clock import Clock, SystemClock
from local_ccm.kube import informer as inf
from local_ccm.logs import V1, V2, V3, kv
from local_ccm.netlink import Change
from local_ccm.runtime.events import Reporter
from local_ccm.runtime.outbox import EventOutbox

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Detected = Mapping[DetectorKey, Detection]
DetectFn = Callable[[], Awaitable[Detected]]
ChangeSource = Callable[[], AsyncIterator[Sequence[Change]]]


@dataclass(frozen=True)
class LoopSettings:
    """The loop's timing and identity; durations in seconds."""

    node_name: str
    reconcile_interval: float = 10.0
    resync_interval: float = 1800.0
    settle_time: float = 5.0
    api_timeout: float = 15.0
    event_namespace: str = "default"
    provider_id: str = ""  # --provider-id template
    debounce_quiet: float = 0.25  # quiet time before a pass (see timing.debounce_wait)
    debounce_max: float = 1.0  # ... and at most 1 s after the first trigger of a burst


class Agent(NodeWrites):
    """The loop's state and its pass for one Node; the writes are :class:`NodeWrites`."""

    def __init__(
        self,
        settings: LoopSettings,
        config: AgentConfig,
        api: NodeApi,
        detect: DetectFn,
        *,
        clock: Clock | None = None,
        metrics: AgentMetrics | None = None,
        changes: ChangeSource | None = None,
        rng: random.Random | None = None,
        provider_ids: ProviderIdSource | None = None,
    ) -> None:
        self.settings, self.config, self.api, self.detect = settings, config, api, detect
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics or AgentMetrics()
        self.changes, self.provider_ids = changes, provider_ids
        self.rng = rng or random.Random()
        self.name = settings.node_name
        self.health = Health(self.clock, max(3 * settings.reconcile_interval, 60.0))
        self.triggers = Triggers(self.clock, settings.debounce_quiet, settings.debounce_max)
        self.events = EventOutbox(
            api, self.clock, Reporter(names.AGENT, self.name, host=self.name),
            namespace=settings.event_namespace, budget=ev.budget(), errors=(NodeApiError,),
        )  # fmt: skip
        self.node = None
        self.present: bool | None = None  # None until the first read
        self.listed_rv = ""
        self.detected: Detected | None = None
        self.fetched_provider_id = None
        self.failures = 0  # consecutive transient failures (backoff attempt)
        self.backoff_until = 0.0
        self.last_error: NodeApiError | None = None
        self.initialized = set()
        self.annotation_on_main = False
        self.no_ip_warned_at: float | None = None
        self.in_pass = False
        self.retry_task = None
        self.watch_task: asyncio.Task[None] | None = None
        self.informer: inf.Informer[Obj] = inf.Informer(
            OwnNode(api, self.name), dict, clock=self.clock, rng=self.rng, name="Node",
            errors=INFORMER_ERRORS, on_end=self._watch_ended,
        )  # fmt: skip
        self.informer.add_handler(self._on_change)
        self._reset_node_state()

    def _reset_node_state(self) -> None:
        """A new or vanished Node starts from scratch."""
        self.fight = FightState()
        self.conflict_manager = None
        self.settle = None
        self.rejected = None
        self.metrics.conflict.set(0)
        for reason in BLOCK_REASONS:
            self.metrics.blocked.labels(reason).set(0)

    # -------------------------------------------------------------- modes (agent.tasks)
    async def run_loop(self, *, check_access: bool = True) -> int:
        """Start up and run passes until cancelled. Returns only for a failed precondition
        (exit 4)."""
        return await tasks.run_loop(self, check_access=check_access)

    async def run_once(self) -> int:
        """Run-once mode: one full pass with bounded retries, then exit 0 or 1."""
        return await tasks.run_once(self)

    # -------------------------------------------------------------- reading the Node
    async def relist(self) -> None:
        """LIST by field selector (a consistent read) and adopt the result."""
        listed = await self.api.list_node(self.name)
        self.listed_rv = listed.resource_version
        if listed.node is None:
            self._node_gone()
        else:
            self._adopt(listed.node, watch=False)

    def _adopt(self, node: Obj, *, watch: bool) -> None:
        if self.node is not None and node_uid(node) == node_uid(self.node):
            if is_older(node_rv(node), node_rv(self.node)):
                return  # an event older than the response of our own write
            if watch:
                self._observe_fight(node)
        elif self.node is not None or self.present is False:
            log.info(
                "Node %s present (uid %s)", self.name, node_uid(node), extra=kv(node=self.name)
            )
            self._reset_node_state()
        self.node, self.present = node, True
        self.metrics.node_present.set(1)

    def _node_gone(self) -> None:
        if self.present is not False:
            log.info("Node %s is absent; waiting for it", self.name, extra=kv(node=self.name))
        self.node, self.present = None, False
        self.metrics.node_present.set(0)
        self._reset_node_state()

    def start_watch(self) -> None:
        """The informer, from the start-up LIST's version: it watches at once."""
        self.informer.prime([] if self.node is None else [self.node], self.listed_rv)
        self.watch_task = asyncio.get_running_loop().create_task(self.informer.run())

    def _on_change(self, change: inf.Change[Obj]) -> None:
        self.health.watch_down_since = None
        node = change.new if change.new is not None else change.old
        if node is None:
            return  # BOOKMARK, SYNCED
        log.log(
            V2 - 3, "watch event %s rv=%s", change.type, node_rv(node), extra=kv(node=self.name)
        )
        if change.type == "DELETED":
            if self.node is None or node_uid(node) in ("", node_uid(self.node)):
                self._node_gone()
        else:
            self._adopt(node, watch=True)
        self.triggers.fire("watch")

    def _watch_ended(self, end: inf.StreamEnd) -> None:
        if end.reason == "stopped":
            return
        self.metrics.watch_restarts.labels(end.reason).inc()
        if end.reason == "error":
            if self.health.watch_down_since is None:
                self.health.watch_down_since = self.clock.monotonic()
            log.log(V1, "watch failed (%s); reconnecting in %.1fs", end.error, end.delay,
                    extra=kv(node=self.name))  # fmt: skip

    # -------------------------------------------------------------- address fights
    def _observe_fight(self, node: Obj) -> None:
        if self.detected is None or self.fight.written is None:
            return
        plan = plan_addresses(node, self.detected, self.config)
        self.fight, what = fight_observe(
            self.fight,
            addresses=current_addresses(node),
            rv=node_rv(node),
            would_write=not addresses_match(node, plan),
            now=self.clock.monotonic(),
        )
        if what is not None:
            self.metrics.reverts.inc()
        if what == "conflict_entered":
            self.conflict_manager = last_address_writer(node) or "another writer"
            self.metrics.conflict.set(1)
            log.warning(
                "status.addresses keeps being reverted by %s; pausing address writes",
                self.conflict_manager,
                extra=kv(node=self.name),
            )
            self.emit(ev.conflict_entered(self.conflict_manager), node)

    def _fight_tick(self) -> None:
        self.fight, what = fight_tick(self.fight, self.clock.monotonic())
        if what == "conflict_resolved":
            self.conflict_manager = None
            self.metrics.conflict.set(0)
            log.info("address conflict resolved", extra=kv(node=self.name))
            self.emit(ev.conflict_resolved())

    # -------------------------------------------------------------- one pass
    async def run_pass(self, triggers: Sequence[str]) -> str:
        """Detect, compute, write; returns the outcome label of ``passes_total``."""
        self.in_pass = True
        start = self.clock.monotonic()
        try:
            outcome = await self._pass(triggers)
        finally:
            self.in_pass = False
        self.metrics.passes.labels(triggers[0], outcome).inc()
        self.metrics.pass_duration.observe(self.clock.monotonic() - start)
        self.health.last_pass = self.clock.monotonic()
        log.log(V3, "pass trigger=%s outcome=%s", triggers[0], outcome, extra=kv(node=self.name))
        return outcome

    async def _pass(self, triggers: Sequence[str]) -> str:
        self.last_error = None
        detected = await self.detect()
        self._observe_detection(detected)
        try:
            if "resync" in triggers:
                await self.relist()
            if self.node is None:
                return "noop"
            if self.clock.monotonic() < self.backoff_until and "retry" not in triggers:
                return "deferred"  # backing off: ticks and watch echoes must not retry early
            return await self._reconcile(detected)
        except NodeApiError as exc:
            return self._on_error(exc)

    def _observe_detection(self, detected: Detected) -> None:
        self.metrics.observe_detections(detected)
        if detected != self.detected:
            for (kind, family), d in sorted(detected.items()):
                log.log(
                    V2, "detector %s %s: %s", kind, family_name(family), d, extra=kv(node=self.name)
                )
        for spec in ev.detection_events(self.detected, detected, self.config):
            level = logging.WARNING if spec.type == "Warning" else logging.INFO
            log.log(level, "%s", spec.message, extra=kv(node=self.name))
            self.emit(spec)
        self.detected = detected

    async def _reconcile(self, detected: Detected) -> str:
        for _ in range(MAX_CONFLICTS):
            try:
                outcome = await self._reconcile_once(detected)
            except ConflictError:
                await self.relist()  # re-read and recompute from scratch; never resend
                if self.node is None:
                    return "noop"
                continue
            self.failures = 0
            self.health.forbidden = None
            return outcome
        log.warning("%d conflicts in a row; backing off", MAX_CONFLICTS, extra=kv(node=self.name))
        self.last_error = ConflictError("too many conflicts")
        self._back_off(None)
        return "failed"

    def _on_error(self, exc: NodeApiError) -> str:
        """The error policy for everything but conflicts: an invalid patch waits for new inputs,
        forbidden and transient errors back off."""
        self.last_error = exc
        if isinstance(exc, NotFoundError):
            self._node_gone()
            return "noop"
        if isinstance(exc, InvalidError):
            return "failed"  # not retried until the inputs change (see self.rejected)
        if isinstance(exc, ForbiddenError):
            self.health.forbidden = exc.message
            log.error("write forbidden: %s", exc.message, extra=kv(node=self.name))
        else:
            log.warning("API error: %s", exc.message, extra=kv(node=self.name))
        self._back_off(exc.retry_after)
        return "failed"

    def _back_off(self, retry_after: float | None) -> None:
        delay = API_BACKOFF.next_delay(self.failures, retry_after, self.rng)
        self.failures += 1
        self.backoff_until = self.clock.monotonic() + delay
        log.log(V2, "retrying in %.1fs", delay, extra=kv(node=self.name))
        self.retry_later(delay)

    async def _reconcile_once(self, detected: Detected) -> str:
        assert self.node is not None
        self._fight_tick()
        plan = plan_addresses(self.node, detected, self.config)
        for f in plan.findings:
            if f.kind == "kept_last_good" and f.type and f.family and f.address:
                self.metrics.observe_kept(f.type, f.family, f.address)
        status = await self._write_status(plan, detected)
        main = await self._write_main(plan)
        self._after_pass(plan)
        if "written" in (status, main):
            return "written"
        return "deferred" if "deferred" in (status, main) else "noop"

    def _after_pass(self, plan: AddressPlan) -> None:
        node = self.node
        assert node is not None
        if addresses_match(node, plan) and not is_tainted(node):
            self.metrics.last_sync.set(self.clock.now().timestamp())
        now = self.clock.monotonic()
        no_internal = not any(a.type == INTERNAL for a in current_addresses(node))
        every = NO_INTERNAL_IP_WARNING_EVERY
        if no_internal and not is_tainted(node) and is_due(self.no_ip_warned_at, now, every):
            self.no_ip_warned_at = now  # initialised without an InternalIP: warned about
            log.warning(
                "the Node is initialised without an InternalIP (NoInternalIP): %s",
                advise_no_internal_ip(node, plan, self.config),
                extra=kv(node=self.name),
            )

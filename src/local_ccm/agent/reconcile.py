"""One pass of the agent for its Node: detect (netlink only) -> compute (pure, ``core``) ->
compare with the cached Node -> write only what differs: the status patch (addresses,
condition, ownership annotation), then the taint and provider-ID patch -> Events and metrics.

A conflict re-reads and recomputes; other API errors follow :meth:`Reconciler._on_error`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from local_ccm import names
from local_ccm.agent import nodeapi as na
from local_ccm.agent.core import events as ev
from local_ccm.agent.core import fight as ft
from local_ccm.agent.core import plan as pl
from local_ccm.agent.core import timing
from local_ccm.agent.core.addresses import AddressPlan
from local_ccm.agent.core.candidates import Detected
from local_ccm.agent.core.config import INTERNAL, AgentConfig, LoopSettings, family_name
from local_ccm.agent.core.gates import Gates, advise_no_internal_ip, decide_gates, desired_condition
from local_ccm.agent.core.labels import plan_label_patch, with_labels
from local_ccm.agent.core.passes import creation_delay, gate_report, plan_settle
from local_ccm.agent.metrics import BLOCK_REASONS, AgentMetrics
from local_ccm.agent.nodecache import NodeCache
from local_ccm.agent.nodemetadata import NodeMetadata
from local_ccm.agent.triggers import Health, Triggers
from local_ccm.clock import Clock
from local_ccm.kube import errors as ke
from local_ccm.logs import V2, V3, kv
from local_ccm.runtime.events import EventSpec, Reporter, rfc3339
from local_ccm.runtime.outbox import EventOutbox

log = logging.getLogger(__name__)
Obj = dict[str, Any]
DetectFn = Callable[[], Awaitable[Detected]]


@dataclass
class NodeState:
    """What the passes remember about one Node object; a new or vanished Node starts over."""

    fight: ft.FightState = field(default_factory=ft.FightState)
    conflict_manager: str | None = None  # set while address writes pause for a fight
    settle: timing.Settle | None = None


@dataclass
class Retry:
    """Consecutive API failures (the backoff attempt) and the time before which only a
    ``retry`` trigger may write."""

    failures: int = 0
    until: float = 0.0
    last_error: ke.ApiError | None = None


class Reconciler:
    """The passes for one Node, what wakes them (``triggers``) and what they report
    (``health``, ``events``). ``fetched_provider_id`` comes from instance metadata."""

    def __init__(
        self, settings: LoopSettings, config: AgentConfig, api: na.NodeApi, detect: DetectFn, *,
        clock: Clock, metrics: AgentMetrics, rng: random.Random,
        metadata: NodeMetadata | None = None,
    ) -> None:  # fmt: skip
        self.settings, self.config, self._detect = settings, config, detect
        self.metadata = metadata
        self._clock, self._metrics, self._rng = clock, metrics, rng
        name = settings.node_name
        self._log = logging.LoggerAdapter(log, kv(node=name))
        self.health = Health(clock, max(3 * settings.reconcile_interval, 60.0))
        self.triggers = Triggers(clock, settings.debounce_quiet, settings.debounce_max)
        self.events = EventOutbox(
            api, clock, Reporter(names.AGENT, name, host=name), namespace=settings.event_namespace,
            budget=ev.budget(),
        )  # fmt: skip
        self.cache = NodeCache(
            api, name, clock=clock, rng=rng, metrics=metrics, health=self.health,
            triggers=self.triggers, replaced=self._reset, updated=self._observe_fight,
            emit=self.emit,
        )  # fmt: skip
        self.detected: Detected | None = None
        self.fetched_provider_id: str | None = None
        self.retry = Retry()
        self._state = NodeState()
        self._annotation_on_main = False  # the apiserver dropped it from a status write
        self._initialized: set[str] = set()  # uids whose taint removal was observed
        self._no_ip_warned_at: float | None = None  # initialised without an InternalIP
        self.in_pass = False
        self._reset()

    def _reset(self) -> None:
        self._state = NodeState()
        self._metrics.conflict.set(0)
        for reason in BLOCK_REASONS:
            self._metrics.blocked.labels(reason).set(0)

    def emit(self, spec: EventSpec, node: Obj | None = None) -> bool:
        """Queue an Event about ``node`` (default: the cached Node); True when queued."""
        node = node or self.cache.node
        return node is not None and self.events.emit(spec, ev.about(node))

    # -------------------------------------------------------------- one pass
    async def run_pass(self, triggers: Sequence[str]) -> str:
        """Detect, compute, write; returns the outcome label of ``passes_total``."""
        self.in_pass = True
        start = self._clock.monotonic()
        try:
            outcome = await self._pass(triggers)
        finally:
            self.in_pass = False
        self._metrics.passes.labels(triggers[0], outcome).inc()
        self._metrics.pass_duration.observe(self._clock.monotonic() - start)
        self.health.last_pass = self._clock.monotonic()
        self._log.log(V3, "pass trigger=%s outcome=%s", triggers[0], outcome)
        return outcome

    async def _pass(self, triggers: Sequence[str]) -> str:
        self.retry.last_error = None
        detected = await self._detect()
        self._observe_detection(detected)
        try:
            if self.cache.node is None:
                return "noop"
            if self._clock.monotonic() < self.retry.until and "retry" not in triggers:
                return "deferred"  # backing off: ticks and watch echoes must not retry early
            return await self._reconcile(detected)
        except ke.ApiError as exc:
            return self._on_error(exc)

    def _observe_detection(self, detected: Detected) -> None:
        self._metrics.observe_detections(detected)
        if detected != self.detected:
            for (kind, family), d in sorted(detected.items()):
                self._log.log(V2, "detector %s %s: %s", kind, family_name(family), d)
        for spec in ev.detection_events(self.detected, detected, self.config):
            level = logging.WARNING if spec.type == "Warning" else logging.INFO
            self._log.log(level, "%s", spec.message)
            self.emit(spec)
        self.detected = detected

    async def _reconcile(self, detected: Detected) -> str:
        for _ in range(timing.MAX_CONFLICTS):
            try:
                outcome = await self._reconcile_once(detected)
            except ke.Conflict:
                await self.cache.relist()  # re-read and recompute from scratch; never resend
                if self.cache.node is None:
                    return "noop"
                continue
            self.retry.failures = 0
            self.health.forbidden = None
            return outcome
        self._log.warning("%d conflicts in a row; backing off", timing.MAX_CONFLICTS)
        self.retry.last_error = ke.Conflict(0, "Conflict", "too many conflicts")
        self._back_off(None)
        return "failed"

    def _on_error(self, exc: ke.ApiError) -> str:
        """The error policy for everything but conflicts: an invalid patch waits for new inputs,
        forbidden and transient errors back off."""
        self.retry.last_error = exc
        if isinstance(exc, ke.NotFound):
            self.cache.gone()
            return "noop"
        if isinstance(exc, ke.Invalid):
            return "failed"  # not retried until the inputs change (NodeCache.rejected)
        if isinstance(exc, ke.Forbidden):
            self.health.forbidden = exc.message
            self._log.error("write forbidden: %s", exc.message)
        else:
            self._log.warning("API error: %s", exc.message)
        self._back_off(exc.retry_after)
        return "failed"

    def _back_off(self, retry_after: float | None) -> None:
        delay = timing.API_BACKOFF.next_delay(self.retry.failures, retry_after, self._rng)
        self.retry.failures += 1
        self.retry.until = self._clock.monotonic() + delay
        self._log.log(V2, "retrying in %.1fs", delay)
        self.triggers.fire_later(delay)

    async def _reconcile_once(self, detected: Detected) -> str:
        assert self.cache.node is not None
        self._fight_tick()
        if self.metadata is not None:
            self.metadata.refresh(self.emit)
        plan = pl.plan_addresses(self.cache.node, detected, self.config)
        for f in plan.findings:
            if f.kind == "kept_last_good" and f.type and f.family and f.address:
                self._metrics.observe_kept(f.type, f.family, f.address)
        status = await self._write_status(plan, detected)
        main = await self._write_main(plan)
        self._after_pass(plan)
        if "written" in (status, main):
            return "written"
        return "deferred" if "deferred" in (status, main) else "noop"

    def _after_pass(self, plan: AddressPlan) -> None:
        node = self.cache.node
        assert node is not None
        tainted = pl.is_tainted(node)
        if pl.addresses_match(node, plan) and not tainted:
            self._metrics.last_sync.set(self._clock.now().timestamp())
        now, every = self._clock.monotonic(), timing.NO_INTERNAL_IP_WARNING_EVERY
        no_internal = not any(a.type == INTERNAL for a in pl.current_addresses(node))
        if no_internal and not tainted and timing.is_due(self._no_ip_warned_at, now, every):
            self._no_ip_warned_at = now
            self._log.warning(
                "the Node is initialised without an InternalIP (NoInternalIP): %s",
                advise_no_internal_ip(node, plan, self.config),
            )

    # -------------------------------------------------------------- address fights
    def _observe_fight(self, node: Obj) -> None:
        """A watch update of the cached Node: did another writer undo our addresses?"""
        if self.detected is None or self._state.fight.written is None:
            return
        plan = pl.plan_addresses(node, self.detected, self.config)
        self._state.fight, what = ft.fight_observe(
            self._state.fight,
            addresses=pl.current_addresses(node),
            rv=pl.node_rv(node),
            would_write=not pl.addresses_match(node, plan),
            now=self._clock.monotonic(),
        )
        if what is not None:
            self._metrics.reverts.inc()
        if what == "conflict_entered":
            manager = ft.last_address_writer(node) or "another writer"
            self._state.conflict_manager = manager
            self._metrics.conflict.set(1)
            self._log.warning(
                "status.addresses keeps being reverted by %s; pausing address writes", manager
            )
            self.emit(ev.conflict_entered(manager), node)

    def _fight_tick(self) -> None:
        self._state.fight, what = ft.fight_tick(self._state.fight, self._clock.monotonic())
        if what == "conflict_resolved":
            self._state.conflict_manager = None
            self._metrics.conflict.set(0)
            self._log.info("address conflict resolved")
            self.emit(ev.conflict_resolved())

    # -------------------------------------------------------------- status
    def _gates(self, node: Obj, plan: AddressPlan) -> Gates:
        template, fetched = self.settings.provider_id, self.fetched_provider_id
        return decide_gates(node, plan, self.config, template=template, fetched=fetched)

    def _condition(self, node: Obj, plan: AddressPlan, detected: Detected) -> pl.Condition | None:
        """The gates that hold the taint now, detector failures and a fight."""
        if not self.config.report_condition:
            return None
        gates = self._gates(node, plan)
        manager = self._state.conflict_manager if self._state.fight.conflict else None
        return desired_condition(
            plan,
            detected,
            blocked=gates.taint.blocked,
            conflict_manager=manager,
            no_internal_ip=gates.advice,
        )

    async def _write_status(self, plan: AddressPlan, detected: Detected) -> str:
        now = self._clock.monotonic()
        may_write = ft.fight_may_write(self._state.fight, now)
        assert self.cache.node is not None
        if may_write and self._settling(self.cache.node, plan, now):
            return "deferred"
        on_main = self._annotation_on_main
        wrote = may_write and on_main and await self._write_annotation(plan)
        node = self.cache.node
        condition = self._condition(node, plan, detected)
        stamp = rfc3339(self._clock.now())
        patch = pl.plan_status_patch(
            node, plan, condition=condition, now=stamp, write_addresses=may_write,
            with_annotation=not on_main,
        )  # fmt: skip
        key = ("status", plan.addresses, plan.annotation, condition, may_write)
        if patch is None or key == self.cache.rejected:
            return "written" if wrote else "noop"
        new = await self.cache.write(patch, key)
        if "/status/addresses" in {op["path"] for op in patch.operations}:
            await self._after_address_write(node, new, plan)
        return "written"

    def _settling(self, node: Obj, plan: AddressPlan, now: float) -> bool:
        """Hold a replacement until it settles (``timing.settle_step`` says why)."""
        settle_time = self.settings.settle_time
        self._state.settle, wait = plan_settle(self._state.settle, node, plan, now, settle_time)
        if wait <= 0:
            return False
        self._log.log(V2, "address change settling for %.1fs", wait)
        self.triggers.fire_later(wait)
        return True

    async def _after_address_write(self, old: Obj, new: Obj, plan: AddressPlan) -> None:
        dropped = not self._annotation_on_main and pl.owned_annotation(new) != plan.annotation
        self._state.fight = ft.fight_record_write(
            self._state.fight, plan.addresses, pl.node_rv(new), self._clock.monotonic()
        )
        change = ev.addresses_updated(pl.current_addresses(old), plan.addresses)
        if change is not None:
            self._log.info("addresses updated: %s", change.message)
            self.emit(change, new)
        if dropped:  # a future apiserver might drop metadata changes on status
            self._log.error(
                "the status write did not store annotation %s (got %r); writing it on the "
                "Node itself from now on",
                names.OWNED_ADDRESSES_ANNOTATION,
                pl.owned_annotation(new),
            )
            self._annotation_on_main = True
            await self._write_annotation(plan)

    async def _write_annotation(self, plan: AddressPlan) -> bool:
        """The ownership annotation in its own RV-guarded patch of the main resource."""
        assert self.cache.node is not None
        patch = pl.plan_annotation_patch(self.cache.node, plan)
        key = ("annotation", plan.annotation)
        if patch is None or key == self.cache.rejected:
            return False
        await self.cache.write(patch, key)
        return True

    # -------------------------------------------------------------- taint, provider ID
    async def _write_main(self, plan: AddressPlan) -> str:
        node = self.cache.node
        assert node is not None
        gates = self._gates(node, plan)
        self._report_gates(node, plan, gates)
        remove = gates.taint.remove
        value = gates.provider.value if gates.provider.kind == "set" else None
        patch = pl.plan_taint_patch(node, remove_taint=remove, provider_id=value)
        labels = self.metadata.plan(node, plan.addresses) if self.metadata else None
        label_patch = plan_label_patch(node, labels) if labels is not None else None
        patch = with_labels(patch, label_patch)  # one write: on the Node before the taint goes
        key = ("main", remove, value, labels and (labels.set, labels.remove, labels.owned))
        written = patch is not None and key != self.cache.rejected
        try:
            new = await self.cache.write(patch, key) if written and patch else node
        except (ke.Forbidden, ke.Invalid) as exc:
            if self.metadata is not None and label_patch is not None:
                self.metadata.refuse(exc.message)  # never hold the taint for the labels
            raise
        if self.metadata is not None and labels is not None:
            self.metadata.report(labels, new, self.emit, written=written)
        if not written:
            return "noop"
        if value:
            self._log.info("set spec.providerID to %s", value)
            self.emit(ev.provider_id_set(value), new)
        if remove:
            self._taint_removed(new)
        return "written"

    def _report_gates(self, node: Obj, plan: AddressPlan, gates: Gates) -> None:
        """Never block silently."""
        report = gate_report(node, plan, gates)
        for reason, value in report.blocked.items():
            self._metrics.blocked.labels(reason).set(value)
        for family, value in report.mismatch.items():
            self._metrics.mismatch.labels(family).set(value)
        for spec in report.events:
            # Logged when the Event is sent, so as often as the Event (not on every pass).
            if self.emit(spec) and spec.type == "Warning":
                self._log.warning("%s: %s", spec.reason, spec.message)

    def _taint_removed(self, node: Obj) -> None:
        delay = creation_delay(node, self._clock.now())
        if pl.node_uid(node) not in self._initialized:
            self._initialized.add(pl.node_uid(node))
            if delay is not None:
                self._metrics.taint_delay.observe(delay)
        self._log.info("removed taint %s", names.UNINITIALIZED_TAINT)
        self.emit(ev.node_initialized(delay), node)

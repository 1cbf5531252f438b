"""The writes of one pass of the agent: the
status patch with the condition, the ownership annotation, the taint and provider-ID patch,
and what a held taint reports.

:class:`NodeWrites` is a mixin of :class:`~local_ccm.agent.loop.Agent` (which owns the state
declared below); every decision it acts on is pure (``agent.plan``, ``agent.passes``,
``agent.timing``). Every write is a JSON Patch guarded by a ``test`` and counted;
the Node it returns becomes the cached one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from local_ccm import names
from local_ccm.agent import tasks
from local_ccm.agent.core import events as ev
from local_ccm.agent.core.addresses import AddressPlan
from local_ccm.agent.core.candidates import Detection, DetectorKey
from local_ccm.agent.core.config import AgentConfig
from local_ccm.agent.core.passes import (
    GateReport,
    creation_delay,
    current_addresses,
    gate_report,
    is_settle_needed,
    node_rv,
    node_uid,
    patch_kinds,
)
from local_ccm.agent.core.plan import (
    Condition,
    FightState,
    Patch,
    ProviderIDAction,
    addresses_match,
    advise_no_internal_ip,
    decide_taint,
    desired_condition,
    desired_provider_id,
    fight_may_write,
    fight_record_write,
    is_tainted,
    owned_annotation,
    plan_annotation_patch,
    plan_status_patch,
    plan_taint_patch,
)
from local_ccm.agent.core.timing import Settle, settle_step
from local_ccm.agent.metrics import AgentMetrics
from local_ccm.agent.nodeapi import ForbiddenError, InvalidError, NodeApi, NodeApiError
from local_ccm.agent.triggers import Triggers
from local_ccm.clock import Clock
from local_ccm.logs import V2, kv
from local_ccm.runtime.events import EventSpec, rfc3339
from local_ccm.runtime.outbox import EventOutbox

if TYPE_CHECKING:
    from local_ccm.agent.loop import LoopSettings

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Detected = Mapping[DetectorKey, Detection]


class NodeWrites:
    """Writing one Node: the agent's status, annotation and main-resource patches."""

    # The Agent's state these methods read and update (set in Agent.__init__).
    settings: LoopSettings
    config: AgentConfig
    api: NodeApi
    clock: Clock
    metrics: AgentMetrics
    events: EventOutbox
    triggers: Triggers
    name: str
    node: Obj | None
    fight: FightState
    conflict_manager: str | None
    settle: Settle | None
    rejected: object  # inputs of a write rejected as invalid: not retried until they change
    annotation_on_main: bool  # the apiserver dropped it from a status write
    initialized: set[str]  # uids whose taint removal was observed
    fetched_provider_id: str | None  # from Azure IMDS, kept for the process
    retry_task: asyncio.Task[None] | None

    # -------------------------------------------------------------- shared with the pass
    def emit(self, spec: EventSpec, node: Obj | None = None) -> bool:
        """Queue an Event about ``node`` (default: the cached Node); rate limited."""
        node = node or self.node
        return node is not None and self.events.emit(spec, ev.about(node))  # True when queued

    def retry_later(self, delay: float) -> None:
        if self.retry_task is not None:
            self.retry_task.cancel()
        self.retry_task = asyncio.get_running_loop().create_task(
            tasks.fire_after(self.clock, self.triggers, delay)
        )

    # -------------------------------------------------------------- status
    def _provider(self, node: Obj) -> ProviderIDAction:
        template, fetched = self.settings.provider_id, self.fetched_provider_id
        return desired_provider_id(node, template=template, fetched=fetched)

    def _condition(self, node: Obj, plan: AddressPlan, detected: Detected) -> Condition | None:
        """The gates that hold the taint now, detector failures and a fight."""
        if not self.config.report_condition:
            return None
        held = decide_taint(
            self.config,
            tainted=is_tainted(node),
            addresses_synced=True,
            plan=plan,
            provider_id_blocks=self._provider(node).kind == "unavailable",
        )
        manager = self.conflict_manager if self.fight.conflict else None
        advice = advise_no_internal_ip(node, plan, self.config)
        return desired_condition(
            plan, detected, blocked=held.blocked, conflict_manager=manager, no_internal_ip=advice
        )

    async def _write_status(self, plan: AddressPlan, detected: Detected) -> str:
        now = self.clock.monotonic()
        may_write = fight_may_write(self.fight, now)
        assert self.node is not None
        if may_write and self._settling(self.node, plan, now):
            return "deferred"
        wrote = may_write and self.annotation_on_main and await self._write_annotation(plan)
        node = self.node
        condition = self._condition(node, plan, detected)
        patch = plan_status_patch(
            node,
            plan,
            condition=condition,
            now=rfc3339(self.clock.now()),
            write_addresses=may_write,
            with_annotation=not self.annotation_on_main,
        )
        key = ("status", plan.addresses, plan.annotation, condition, may_write)
        if patch is None or key == self.rejected:
            return "written" if wrote else "noop"
        new = await self._write(patch, key)
        if "/status/addresses" in {op["path"] for op in patch.operations}:
            await self._after_address_write(node, new, plan)
        return "written"

    async def _after_address_write(self, old: Obj, new: Obj, plan: AddressPlan) -> None:
        dropped = not self.annotation_on_main and owned_annotation(new) != plan.annotation
        self.fight = fight_record_write(
            self.fight, plan.addresses, node_rv(new), self.clock.monotonic()
        )
        change = ev.addresses_updated(current_addresses(old), plan.addresses)
        if change is not None:
            log.info("addresses updated: %s", change.message, extra=kv(node=self.name))
            self.emit(change, new)
        if dropped:  # a future apiserver might drop metadata changes on status
            log.error(
                "the status write did not store annotation %s (got %r); writing it on the "
                "Node itself from now on",
                names.OWNED_ADDRESSES_ANNOTATION,
                owned_annotation(new),
                extra=kv(node=self.name),
            )
            self.annotation_on_main = True
            await self._write_annotation(plan)

    async def _write_annotation(self, plan: AddressPlan) -> bool:
        """The ownership annotation in its own RV-guarded patch of the main resource."""
        assert self.node is not None
        patch = plan_annotation_patch(self.node, plan)
        key = ("annotation", plan.annotation)
        if patch is None or key == self.rejected:
            return False
        await self._write(patch, key)
        return True

    def _settling(self, node: Obj, plan: AddressPlan, now: float) -> bool:
        """Two detections ``settle_time`` apart must agree before a replacement, so an address
        that flaps during a DHCP renewal is not written."""
        if not is_settle_needed(node, plan):
            self.settle = None
            return False
        self.settle, wait = settle_step(self.settle, plan.owned, now, self.settings.settle_time)
        if wait <= 0:
            return False
        log.log(V2, "address change settling for %.1fs", wait, extra=kv(node=self.name))
        self.retry_later(wait)
        return True

    # -------------------------------------------------------------- taint, provider ID
    async def _write_main(self, plan: AddressPlan) -> str:
        node = self.node
        assert node is not None
        provider = self._provider(node)
        decision = decide_taint(
            self.config,
            tainted=is_tainted(node),
            addresses_synced=addresses_match(node, plan),
            plan=plan,
            provider_id_blocks=provider.kind == "unavailable",
        )
        advice = advise_no_internal_ip(node, plan, self.config)
        self._report_gates(gate_report(node, decision, plan, provider, no_internal_ip=advice))
        value = provider.value if provider.kind == "set" else None
        patch = plan_taint_patch(node, remove_taint=decision.remove, provider_id=value)
        key = ("main", decision.remove, value)
        if patch is None or key == self.rejected:
            return "noop"
        new = await self._write(patch, key)
        if value:
            log.info("set spec.providerID to %s", value, extra=kv(node=self.name))
            self.emit(ev.provider_id_set(value), new)
        if decision.remove:
            self._initialized(new)
        return "written"

    def _report_gates(self, report: GateReport) -> None:
        """Never block silently."""
        for reason, value in report.blocked.items():
            self.metrics.blocked.labels(reason).set(value)
        for family, value in report.mismatch.items():
            self.metrics.mismatch.labels(family).set(value)
        for spec in report.events:
            # Logged when the Event is sent, so as often as the Event (not on every pass).
            if self.emit(spec) and spec.type == "Warning":
                log.warning("%s: %s", spec.reason, spec.message, extra=kv(node=self.name))

    def _initialized(self, node: Obj) -> None:
        delay = creation_delay(node, self.clock.now())
        if node_uid(node) not in self.initialized:
            self.initialized.add(node_uid(node))
            if delay is not None:
                self.metrics.taint_delay.observe(delay)
        log.info("removed taint %s", names.UNINITIALIZED_TAINT, extra=kv(node=self.name))
        self.emit(ev.node_initialized(delay), node)

    async def _write(self, patch: Patch, key: object) -> Obj:
        """One PATCH; counts it and caches the returned Node; reports rejections."""
        kinds = patch_kinds(patch)
        log.debug(
            "PATCH %s %s", patch.subresource or "node", patch.body(), extra=kv(node=self.name)
        )
        try:
            new = await self.api.patch_node(self.name, patch)
        except NodeApiError as exc:
            result = {"conflict": "conflict", "invalid": "invalid", "forbidden": "forbidden"}
            for kind in kinds:
                self.metrics.writes.labels(kind, result.get(exc.kind, "error")).inc()
            if isinstance(exc, InvalidError | ForbiddenError):
                self.emit(ev.update_rejected(f"PATCH of {'/'.join(kinds)}", exc.message))
            if isinstance(exc, InvalidError):
                self.rejected = key
                log.warning("write rejected: %s", exc.message, extra=kv(node=self.name))
            raise
        for kind in kinds:
            self.metrics.writes.labels(kind, "success").inc()
        self.node = new
        return new

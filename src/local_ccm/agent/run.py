"""The agent's loop (spec/agent.md §6): start-up, triggers and debounce, passes, watch,
resync, settle and backoff, Node deletion, shutdown, and run-once (§2.7).

One pass = detect (netlink only) -> compute (pure, ``agent.plan``) -> compare with the cached
Node -> status PATCH if needed -> taint / provider-ID PATCH (§7) -> Events and metrics.
Steady state costs no API request per tick: the Node is cached from one watch (§6.3).
Time comes from an injected :class:`Clock`, the API from a :class:`NodeApi`, detection from
an async callable, so unit tests drive the whole loop with fakes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from local_ccm import names
from local_ccm.agent import events as ev
from local_ccm.agent.addresses import AddressPlan, NodeAddress, node_addresses, parse_owned
from local_ccm.agent.candidates import Detection, DetectorKey, Disabled, Found
from local_ccm.agent.config import ADDRESS_TYPES, FAMILIES, AgentConfig, family_name
from local_ccm.agent.metrics import BLOCK_REASONS, AgentMetrics
from local_ccm.agent.nodeapi import (
    ConflictError,
    ExpiredError,
    ForbiddenError,
    InvalidError,
    NodeApi,
    NodeApiError,
    NodeEvent,
    NotFoundError,
    TransientError,
    UnauthorizedError,
)
from local_ccm.agent.options import AgentOptions
from local_ccm.agent.plan import (
    Condition,
    FightState,
    Patch,
    ProviderIDAction,
    TaintDecision,
    addresses_match,
    decide_taint,
    desired_condition,
    fight_may_write,
    fight_observe,
    fight_record_write,
    fight_tick,
    is_tainted,
    last_address_writer,
    plan_addresses,
    plan_status_patch,
    plan_taint_patch,
    provider_id_action,
    render_provider_id,
)
from local_ccm.clock import Clock, SystemClock
from local_ccm.kube.backoff import Backoff
from local_ccm.logs import V1, V2, V3, kv
from local_ccm.netlink import Change
from local_ccm.serve import Checks, Servers, start_servers

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Detected = Mapping[DetectorKey, Detection]
DetectFn = Callable[[], Awaitable[Detected]]
ChangeSource = Callable[[], AsyncIterator[Sequence[Change]]]

API_BACKOFF = Backoff(initial=1.0, factor=2.0, cap=300.0, full_jitter=True)  # §6.5.2
WATCH_BACKOFF = Backoff(initial=0.5, factor=2.0, cap=30.0, jitter=0.2)
MONITOR_BACKOFF = Backoff(initial=1.0, factor=2.0, cap=60.0, jitter=0.2)
MAX_CONFLICTS = 5  # consecutive conflict re-reads before backing off (§5.3)
RUN_ONCE_TRANSIENT_RETRIES = 3
RUN_ONCE_DEADLINE = 60.0
SHUTDOWN_GRACE = 5.0
WATCH_GRACE = 60.0  # readiness tolerates a reconnecting watch this long (§8.4)
EXIT_OK, EXIT_FAILED, EXIT_PRECONDITION = 0, 1, 4
REQUIRED_ACCESS = (  # §2.6: (verb, resource, subresource, namespaced)
    ("get", "nodes", "", False),
    ("list", "nodes", "", False),
    ("watch", "nodes", "", False),
    ("patch", "nodes", "", False),
    ("patch", "nodes", "status", False),
    ("create", "events", "", True),
)


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
    debounce_quiet: float = 0.25  # §6.2: a pass starts after 250 ms without a trigger ...
    debounce_max: float = 1.0  # ... and at most 1 s after the first trigger of a burst


class PreconditionError(Exception):
    """Exit 4 in loop mode (§2.6): credentials rejected or permissions missing."""


# ------------------------------------------------------------------ pure helpers
def is_settle_needed(node: Obj, plan: AddressPlan) -> bool:
    """§6.5.1: the plan removes or replaces an owned address already on the (initialised)
    Node. The first write (nothing owned yet, or still tainted) is immediate."""
    if is_tainted(node):
        return False
    annotations = node.get("metadata", {}).get("annotations") or {}
    owned, _ = parse_owned(annotations.get(names.OWNED_ADDRESSES_ANNOTATION))
    if not owned:
        return False
    current = {a.key for a in _addresses(node)}
    desired = {a.key for a in plan.addresses}
    return any(o.key in current and o.key not in desired for o in owned)


def _addresses(node: Obj) -> tuple[NodeAddress, ...]:
    return node_addresses((node.get("status") or {}).get("addresses"))


def unmet_run_once(
    node: Obj, plan: AddressPlan, detected: Detected, config: AgentConfig, provider_id: str
) -> list[str]:
    """§2.7: the reasons run-once did not reach the final state (empty = exit 0)."""
    unmet = []
    if not addresses_match(node, plan):
        unmet.append("status.addresses differ from the desired list")
    for (kind, family), d in sorted(detected.items()):
        if not isinstance(d, Found | Disabled):
            unmet.append(f"{kind} {family_name(family)} detection failed: {d.reason} {d.detail}")
    if config.remove_taint and is_tainted(node):
        unmet.append(f"taint {names.UNINITIALIZED_TAINT} is still present")
    if provider_id and not (node.get("spec") or {}).get("providerID"):
        unmet.append("spec.providerID is not set")
    return unmet


def _rv(node: Obj | None) -> str:
    return str(((node or {}).get("metadata") or {}).get("resourceVersion", ""))


def _uid(node: Obj | None) -> str:
    return str(((node or {}).get("metadata") or {}).get("uid", ""))


def _older(rv: str, than: str) -> bool:
    try:
        return int(rv) < int(than)
    except ValueError:  # resourceVersions are opaque; etcd's are integers
        return False


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _patch_kinds(patch: Patch) -> list[str]:
    """Metric ``kind`` labels for one PATCH (§8.3)."""
    paths = [str(op["path"]) for op in patch.operations if op["op"] != "test"]
    kinds = []
    if "/status/addresses" in paths:
        kinds.append("addresses")
    if any(p.startswith("/status/conditions") for p in paths):
        kinds.append("condition")
    if any(p.startswith("/spec/taints") for p in paths):
        kinds.append("taint")
    if "/spec/providerID" in paths:
        kinds.append("provider_id")
    return kinds


# ------------------------------------------------------------------ triggers (§6.2)
class Triggers:
    """Coalesces triggers: a burst ends after ``quiet`` seconds without a new one, or
    ``longest`` seconds after its first trigger."""

    def __init__(self, clock: Clock, quiet: float, longest: float) -> None:
        self._clock, self._quiet, self._longest = clock, quiet, longest
        self._pending: list[str] = []
        self._last = 0.0
        self._event = asyncio.Event()

    def fire(self, kind: str) -> None:
        if kind not in self._pending:
            self._pending.append(kind)
        self._last = self._clock.monotonic()
        self._event.set()

    async def next_burst(self) -> list[str]:
        await self._event.wait()
        first = self._clock.monotonic()
        while (
            wait := min(self._last + self._quiet, first + self._longest) - self._clock.monotonic()
        ) > 0:
            await self._clock.sleep(wait)
        kinds, self._pending = self._pending, []
        self._event.clear()
        return kinds


# ------------------------------------------------------------------ health (§8.4)
class Health:
    """Plain timestamps the HTTP thread reads; the loop writes them."""

    def __init__(self, clock: Clock, pass_budget: float) -> None:
        self._clock = clock
        self.pass_budget = pass_budget
        self.beat = clock.monotonic()
        self.last_pass = clock.monotonic()
        self.first_pass = False
        self.watch_down_since: float | None = None
        self.forbidden: str | None = None

    def loop_ok(self) -> tuple[bool, str]:
        age = self._clock.monotonic() - self.beat
        return age < 10.0, f"event loop last ticked {age:.1f}s ago"

    def pass_ok(self) -> tuple[bool, str]:
        age = self._clock.monotonic() - self.last_pass
        return age < self.pass_budget, f"last pass completed {age:.1f}s ago"

    def first_pass_ok(self) -> tuple[bool, str]:
        return self.first_pass, "the first pass has not completed"

    def watch_ok(self) -> tuple[bool, str]:
        since = self.watch_down_since
        if since is None:
            return True, "connected"
        down = self._clock.monotonic() - since
        return down < WATCH_GRACE, f"watch reconnecting for {down:.0f}s"

    def writes_ok(self) -> tuple[bool, str]:
        return self.forbidden is None, f"last write was forbidden: {self.forbidden}"


# ------------------------------------------------------------------ the agent
class Agent:
    """The loop's state and behaviour for one Node."""

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
    ) -> None:
        self.settings, self.config, self.api, self.detect = settings, config, api, detect
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics or AgentMetrics()
        self.changes = changes
        self.rng = rng or random.Random()
        self.name = settings.node_name
        self.health = Health(self.clock, max(3 * settings.reconcile_interval, 60.0))
        self.triggers = Triggers(self.clock, settings.debounce_quiet, settings.debounce_max)
        self.outbox: asyncio.Queue[Obj] = asyncio.Queue()
        self.node: Obj | None = None
        self.present: bool | None = None  # None until the first read
        self.watch_rv = ""
        self.detected: Detected | None = None
        self.failures = 0  # consecutive transient failures (backoff attempt)
        self.backoff_until = 0.0
        self.last_error: NodeApiError | None = None
        self.budget = ev.EventBudget()
        self.initialized: set[str] = set()  # uids whose taint removal was observed
        self.in_pass = False
        self._retry: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._reset_node_state()

    def _reset_node_state(self) -> None:
        """§6.6: a new or vanished Node starts from scratch."""
        self.fight = FightState()
        self.conflict_manager: str | None = None
        self.settle: tuple[tuple[NodeAddress, ...], float] | None = None
        self.rejected: object = None  # inputs of a write rejected as invalid
        self.metrics.conflict.set(0)
        for reason in BLOCK_REASONS:
            self.metrics.blocked.labels(reason).set(0)

    # -------------------------------------------------------------- reading the Node
    async def relist(self) -> None:
        """LIST by field selector (a consistent read) and adopt the result."""
        listed = await self.api.list_node(self.name)
        self.watch_rv = listed.resource_version
        if listed.node is None:
            self._node_gone()
        else:
            self._adopt(listed.node, watch=False)

    def _adopt(self, node: Obj, *, watch: bool) -> None:
        if self.node is not None and _uid(node) == _uid(self.node):
            if _older(_rv(node), _rv(self.node)):
                return  # an event older than the response of our own write
            if watch:
                self._observe_fight(node)
        elif self.node is not None or self.present is False:
            log.info("Node %s present (uid %s)", self.name, _uid(node), extra=kv(node=self.name))
            self._reset_node_state()
        self.node, self.present = node, True
        self.metrics.node_present.set(1)

    def _node_gone(self) -> None:
        if self.present is not False:
            log.info("Node %s is absent; waiting for it", self.name, extra=kv(node=self.name))
        self.node, self.present = None, False
        self.metrics.node_present.set(0)
        self._reset_node_state()

    def on_watch_event(self, event: NodeEvent) -> None:
        rv = _rv(event.node)
        if rv:
            self.watch_rv = rv
        self.health.watch_down_since = None
        if event.type == "BOOKMARK":
            return
        log.log(V2 - 3, "watch event %s rv=%s", event.type, rv, extra=kv(node=self.name))
        if event.type == "DELETED":
            if self.node is None or _uid(event.node) in ("", _uid(self.node)):
                self._node_gone()
        else:
            self._adopt(event.node, watch=True)
        self.triggers.fire("watch")

    # -------------------------------------------------------------- address fights (§7.4)
    def _observe_fight(self, node: Obj) -> None:
        if self.detected is None or self.fight.written is None:
            return
        plan = plan_addresses(node, self.detected, self.config)
        self.fight, what = fight_observe(
            self.fight,
            addresses=_addresses(node),
            rv=_rv(node),
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

    # -------------------------------------------------------------- events
    def emit(self, spec: ev.EventSpec, node: Obj | None = None) -> None:
        """Queue an Event (sent by :meth:`send_events`); rate limited (§8.1)."""
        node = node or self.node
        if node is None:
            return
        self.budget, ok = ev.admit(self.budget, spec, self.clock.monotonic())
        if ok:
            now = _rfc3339(self.clock.now())
            namespace = self.settings.event_namespace
            self.outbox.put_nowait(ev.event_body(spec, node, namespace=namespace, now=now))

    async def send_events(self) -> None:
        while True:
            body = await self.outbox.get()
            try:
                await self.api.create_event(self.settings.event_namespace, body)
            except NodeApiError as exc:
                log.warning(
                    "could not create Event %s: %s", body["reason"], exc, extra=kv(node=self.name)
                )

    async def flush_events(self, timeout: float) -> None:
        """Run-once: send what is queued, bounded."""

        async def drain() -> None:
            while not self.outbox.empty():
                body = self.outbox.get_nowait()
                try:
                    await self.api.create_event(self.settings.event_namespace, body)
                except NodeApiError as exc:
                    log.warning("could not create Event: %s", exc, extra=kv(node=self.name))

        try:
            await asyncio.wait_for(drain(), timeout)
        except TimeoutError:
            log.warning("gave up sending Events", extra=kv(node=self.name))

    # -------------------------------------------------------------- one pass (§6.2)
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
                self._restart_watch()
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
            for key, d in sorted(detected.items()):
                log.log(
                    V2,
                    "detector %s %s: %s",
                    key[0],
                    family_name(key[1]),
                    d,
                    extra=kv(node=self.name),
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
        """§5.3's policy for everything but conflicts."""
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
        self._retry_later(delay)

    async def _reconcile_once(self, detected: Detected) -> str:
        assert self.node is not None
        self._fight_tick()
        plan = plan_addresses(self.node, detected, self.config)
        for f in plan.findings:
            if f.kind == "kept_last_good" and f.type and f.family and f.address:
                self.metrics.observe_kept(f.type, f.family, f.address)
        status = await self._write_status(self.node, plan, detected)
        main = await self._write_main(plan)
        if addresses_match(self.node, plan) and not is_tainted(self.node):
            self.metrics.last_sync.set(self.clock.now().timestamp())
        if "written" in (status, main):
            return "written"
        return "deferred" if "deferred" in (status, main) else "noop"

    def _provider(self, node: Obj) -> ProviderIDAction:
        template = self.settings.provider_id
        desired = render_provider_id(template, node) if template else None
        return provider_id_action(node, desired, configured=bool(template))

    def _condition(self, plan: AddressPlan, detected: Detected, node: Obj) -> Condition | None:
        if not self.config.report_condition:
            return None
        provider = self._provider(node)
        blocks = provider.kind == "unavailable"
        prelim = decide_taint(
            self.config, tainted=True, addresses_synced=True, plan=plan, provider_id_blocks=blocks
        )
        manager = self.conflict_manager if self.fight.conflict else None
        return desired_condition(plan, detected, blocked=prelim.blocked, conflict_manager=manager)

    async def _write_status(self, node: Obj, plan: AddressPlan, detected: Detected) -> str:
        now = self.clock.monotonic()
        may_write = fight_may_write(self.fight, now)
        if may_write and self._settling(node, plan, now):
            return "deferred"
        condition = self._condition(plan, detected, node)
        patch = plan_status_patch(
            node,
            plan,
            condition=condition,
            now=_rfc3339(self.clock.now()),
            write_addresses=may_write,
        )
        key = ("status", plan.addresses, plan.annotation, condition, may_write)
        if patch is None or key == self.rejected:
            return "noop"
        new = await self._write(patch, key)
        if "addresses" in _patch_kinds(patch):
            self._after_address_write(node, new, plan)
        return "written"

    def _after_address_write(self, old: Obj, new: Obj, plan: AddressPlan) -> None:
        stored = (new.get("metadata", {}).get("annotations") or {}).get(
            names.OWNED_ADDRESSES_ANNOTATION
        )
        if stored != plan.annotation:  # §5.2: a future apiserver might drop metadata on status
            log.error(
                "the status write did not store annotation %s (got %r)",
                names.OWNED_ADDRESSES_ANNOTATION,
                stored,
                extra=kv(node=self.name),
            )
        self.fight = fight_record_write(
            self.fight, plan.addresses, _rv(new), self.clock.monotonic()
        )
        change = ev.addresses_updated(_addresses(old), plan.addresses)
        if change is not None:
            log.info("addresses updated: %s", change.message, extra=kv(node=self.name))
            self.emit(change, new)

    def _settling(self, node: Obj, plan: AddressPlan, now: float) -> bool:
        """§6.5.1: two detections ``settle_time`` apart must agree before a replacement."""
        if not is_settle_needed(node, plan):
            self.settle = None
            return False
        if self.settle is None or self.settle[0] != plan.owned:
            self.settle = (plan.owned, now)
        elapsed = now - self.settle[1]
        if elapsed >= self.settings.settle_time:
            self.settle = None
            return False
        log.log(
            V2,
            "address change settling for %.1fs",
            self.settings.settle_time - elapsed,
            extra=kv(node=self.name),
        )
        self._retry_later(self.settings.settle_time - elapsed)
        return True

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
        self._report_gates(node, decision, plan, provider)
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

    def _initialized(self, node: Obj) -> None:
        created = node.get("metadata", {}).get("creationTimestamp")
        delay = None
        if created:
            born = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
            delay = max(0.0, (self.clock.now() - born).total_seconds())
        if _uid(node) not in self.initialized:
            self.initialized.add(_uid(node))
            if delay is not None:
                self.metrics.taint_delay.observe(delay)
        log.info("removed taint %s", names.UNINITIALIZED_TAINT, extra=kv(node=self.name))
        self.emit(ev.node_initialized(delay), node)

    def _report_gates(
        self, node: Obj, decision: TaintDecision, plan: AddressPlan, provider: ProviderIDAction
    ) -> None:
        """§7.2, §7.3, §5.5: never block silently."""
        held = set(decision.blocked) if is_tainted(node) else set()
        for reason in BLOCK_REASONS:
            self.metrics.blocked.labels(reason).set(1 if reason in held else 0)
        for spec in ev.initialization_blocked(decision.blocked if held else ()):
            self.emit(spec)
        mismatched = {f.family for f in plan.findings if f.kind == "provided_mismatch"}
        for family in FAMILIES:
            self.metrics.mismatch.labels(family_name(family)).set(1 if family in mismatched else 0)
        for spec in ev.provided_mismatches(plan.findings):
            self.emit(spec)
        if provider.kind == "mismatch" and provider.existing:
            self.emit(ev.provider_id_mismatch(provider.existing, provider.value))

    async def _write(self, patch: Patch, key: object) -> Obj:
        """One PATCH; counts it and caches the returned Node; reports rejections."""
        kinds = _patch_kinds(patch)
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

    # -------------------------------------------------------------- timers
    def _retry_later(self, delay: float) -> None:
        if self._retry is not None:
            self._retry.cancel()
        self._retry = asyncio.get_running_loop().create_task(self._fire_after(delay, "retry"))

    async def _fire_after(self, delay: float, kind: str) -> None:
        await self.clock.sleep(delay)
        self.triggers.fire(kind)

    async def tick(self) -> None:
        while True:
            await self.clock.sleep(self.settings.reconcile_interval)
            self.triggers.fire("tick")

    async def resync(self) -> None:
        while True:
            jitter = 0.9 + 0.2 * self.rng.random()  # ±10 % (§6.4)
            await self.clock.sleep(self.settings.resync_interval * jitter)
            self.triggers.fire("resync")

    async def watchdog(self) -> None:
        while True:
            self.health.beat = self.clock.monotonic()
            await self.clock.sleep(1.0)

    async def work(self) -> None:
        """Passes never overlap: one worker consumes coalesced triggers."""
        while True:
            await self.run_pass(await self.triggers.next_burst())

    # -------------------------------------------------------------- watch (§6.3, §6.4)
    async def watch(self) -> None:
        failures = 0
        while True:
            delay = 0.0
            try:
                async for event in self.api.watch_node(self.name, self.watch_rv):
                    failures = 0
                    self.on_watch_event(event)
                reason = "timeout"
            except ExpiredError:
                reason = "gone"
                log.log(V1, "watch expired; relisting", extra=kv(node=self.name))
                self.triggers.fire("resync")
                self.metrics.watch_restarts.labels(reason).inc()
                return  # the resync pass relists and restarts the watch
            except NodeApiError as exc:
                reason = "error"
                delay = WATCH_BACKOFF.next_delay(failures, exc.retry_after, self.rng)
                failures += 1
                if self.health.watch_down_since is None:
                    self.health.watch_down_since = self.clock.monotonic()
                log.log(
                    V1,
                    "watch failed (%s); reconnecting in %.1fs",
                    exc,
                    delay,
                    extra=kv(node=self.name),
                )
            self.metrics.watch_restarts.labels(reason).inc()
            await self.clock.sleep(delay)

    def _restart_watch(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        self._watch = asyncio.get_running_loop().create_task(self.watch())

    # -------------------------------------------------------------- netlink (§6.2)
    async def netlink(self) -> None:
        if self.changes is None:
            return
        failures = 0
        while True:
            try:
                async for batch in self.changes():
                    failures = 0
                    for change in batch:
                        kind = {"address": "addr", "resync": "overflow"}.get(
                            change.kind, change.kind
                        )
                        self.metrics.netlink_events.labels(kind).inc()
                    self.triggers.fire("netlink")
            except OSError as exc:
                delay = MONITOR_BACKOFF.next_delay(failures, None, self.rng)
                failures += 1
                log.warning(
                    "netlink monitor failed (%s); reopening in %.1fs",
                    exc,
                    delay,
                    extra=kv(node=self.name),
                )
                await self.clock.sleep(delay)

    # -------------------------------------------------------------- start-up and modes
    async def check_access(self) -> None:
        """§2.6: SelfSubjectAccessReview for every permission the loop needs."""
        missing = []
        for verb, resource, sub, namespaced in REQUIRED_ACCESS:
            namespace = self.settings.event_namespace if namespaced else ""
            try:
                allowed = await self.api.can_i(verb, resource, subresource=sub, namespace=namespace)
            except UnauthorizedError as exc:
                raise PreconditionError(f"credentials rejected: {exc.message}") from exc
            if not allowed:
                missing.append(f"{verb} {resource}{'/' + sub if sub else ''}")
        if missing:
            raise PreconditionError("missing permissions: " + ", ".join(missing))

    async def initial_list(self) -> None:
        """§6.1 step 4: transient errors back off; rejected credentials are fatal."""
        failures = 0
        while True:
            try:
                await self.relist()
                return
            except (UnauthorizedError, ForbiddenError) as exc:
                raise PreconditionError(f"cannot list Node {self.name}: {exc.message}") from exc
            except NodeApiError as exc:
                delay = API_BACKOFF.next_delay(failures, exc.retry_after, self.rng)
                failures += 1
                log.warning(
                    "listing Node failed (%s); retry in %.1fs", exc, delay, extra=kv(node=self.name)
                )
                await self.clock.sleep(delay)

    async def run_loop(self, *, check_access: bool = True) -> int:
        """§6.1; runs until cancelled. Returns only for a failed precondition (exit 4)."""
        tasks: list[asyncio.Task[None]] = []
        loop = asyncio.get_running_loop()
        try:
            tasks.append(loop.create_task(self.netlink()))  # step 2: the monitor first
            if check_access:
                await self.check_access()
            await self.initial_list()
            await self.run_pass(["startup"])
            self.health.first_pass = True
            self._restart_watch()
            for job in (self.send_events, self.tick, self.resync, self.watchdog):
                tasks.append(loop.create_task(job()))
            await self.work()
        except PreconditionError as exc:
            print(f"{names.AGENT}: {exc}", file=sys.stderr)
            log.error("start-up precondition failed: %s", exc, extra=kv(node=self.name))
            return EXIT_PRECONDITION
        finally:
            for task in [*tasks, self._watch, self._retry]:
                if task is not None:
                    task.cancel()
        return EXIT_OK

    async def run_once(self) -> int:
        """§2.5/§2.7: one full pass with bounded retries, then exit 0 or 1."""
        try:
            return await asyncio.wait_for(self._once(), RUN_ONCE_DEADLINE)
        except TimeoutError:
            print(
                f"{names.AGENT}: run-once: no final state within {RUN_ONCE_DEADLINE:.0f}s",
                file=sys.stderr,
            )
            return EXIT_FAILED
        finally:
            if self._retry is not None:
                self._retry.cancel()

    async def _once(self) -> int:
        for attempt in range(RUN_ONCE_TRANSIENT_RETRIES + 1):
            try:
                await self.relist()
            except NodeApiError as exc:
                self.last_error = exc
            else:
                if self.node is None:
                    print(f"{names.AGENT}: Node {self.name} not found", file=sys.stderr)
                    return EXIT_FAILED
                self.backoff_until = 0.0  # run-once keeps its own retry count
                await self.run_pass(["startup"])
            if not isinstance(self.last_error, TransientError | ConflictError):
                break
            await self.clock.sleep(
                API_BACKOFF.next_delay(attempt, self.last_error.retry_after, self.rng)
            )
        await self.flush_events(5.0)
        return self._verdict()

    def _verdict(self) -> int:
        if self.node is None or self.detected is None:
            error = self.last_error.message if self.last_error else "Node not read"
            print(f"{names.AGENT}: run-once failed: {error}", file=sys.stderr)
            return EXIT_FAILED
        plan = plan_addresses(self.node, self.detected, self.config)
        unmet = unmet_run_once(
            self.node, plan, self.detected, self.config, self.settings.provider_id
        )
        for item in unmet:
            print(f"{names.AGENT}: unmet: {item}", file=sys.stderr)
        if self.last_error is not None and unmet:
            print(f"{names.AGENT}: last error: {self.last_error.message}", file=sys.stderr)
        return EXIT_FAILED if unmet else EXIT_OK


# ------------------------------------------------------------------ process wiring
def detector_keys() -> list[DetectorKey]:
    return [(k, f) for k in ADDRESS_TYPES for f in FAMILIES]


async def serve_until(agent: Agent, stop: asyncio.Event) -> int:
    """Run the loop until ``stop`` is set (§6.7): an in-flight pass may finish (bounded)."""
    loop = asyncio.get_running_loop()
    main = loop.create_task(agent.run_loop())
    stopper = loop.create_task(stop.wait())
    done, _ = await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if main in done:
        stopper.cancel()
        return main.result()
    grace = min(agent.settings.api_timeout, SHUTDOWN_GRACE)
    deadline = loop.time() + grace
    while agent.in_pass and loop.time() < deadline:
        await asyncio.sleep(0.05)
    main.cancel()
    await asyncio.gather(main, return_exceptions=True)
    log.info("stopped", extra=kv(node=agent.name))
    return EXIT_OK


def install_signal_handlers(stop: asyncio.Event) -> None:
    """First SIGTERM/SIGINT: graceful stop; a second one exits at once (§6.7)."""
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            os._exit(EXIT_FAILED)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)


def kernel_detector(config: AgentConfig, netns: str | None = None) -> DetectFn:
    """Detection in a worker thread (netlink calls block); ``netns`` is for tests."""
    from local_ccm.agent.detect import detect_addresses  # noqa: PLC0415

    async def detect() -> Detected:
        report = await asyncio.to_thread(detect_addresses, config, netns=netns)
        return report.results

    return detect


def kernel_changes(netns: str | None = None) -> ChangeSource:
    """Each call opens a netlink subscription at once (§6.1 step 2) and iterates it."""
    from local_ccm.netlink import Monitor  # noqa: PLC0415

    def open_changes() -> AsyncIterator[Sequence[Change]]:
        monitor = Monitor(netns=netns)

        async def iterate() -> AsyncIterator[Sequence[Change]]:
            try:
                async for batch in monitor.changes():
                    yield batch
            finally:
                monitor.close()

        return iterate()

    return open_changes


def settings_from(options: AgentOptions) -> LoopSettings:
    assert options.node_name is not None
    return LoopSettings(
        node_name=options.node_name,
        reconcile_interval=options.reconcile_interval,
        resync_interval=options.resync_interval,
        settle_time=options.settle_time,
        api_timeout=options.api_timeout,
        event_namespace=options.event_namespace,
        provider_id=options.provider_id,
    )


def build_agent(
    options: AgentOptions,
    api: NodeApi,
    *,
    metrics: AgentMetrics | None = None,
    netns: str | None = None,
    clock: Clock | None = None,
) -> Agent:
    """The agent over the real kernel; ``netns`` runs the netlink side in a namespace."""
    return Agent(
        settings_from(options),
        options.config,
        api,
        kernel_detector(options.config, netns),
        clock=clock,
        metrics=metrics,
        changes=kernel_changes(netns),
    )


def kube_api(options: AgentOptions, metrics: AgentMetrics) -> tuple[NodeApi, Callable[[], None]]:
    """The KubeNodeApi over the resolved credentials, and how to close it."""
    from local_ccm.agent.nodeapi import KubeNodeApi  # noqa: PLC0415
    from local_ccm.kube.aio import AsyncClient  # noqa: PLC0415
    from local_ccm.kube.client import Client  # noqa: PLC0415

    assert options.cluster is not None
    client = Client(
        options.cluster,
        field_manager=names.AGENT,
        user_agent=f"{names.AGENT}/{options.node_name}",
        timeout=options.api_timeout,
    )
    return KubeNodeApi(AsyncClient(client), observe=metrics.observe_request), client.close


def start_http(options: AgentOptions, agent: Agent) -> Servers:
    """§8.4: /healthz, /readyz and /metrics (not ready until the first pass)."""
    healthz, readyz = Checks(), Checks()
    healthz.add("event-loop", agent.health.loop_ok)
    healthz.add("passes", agent.health.pass_ok)
    readyz.add("first-pass", agent.health.first_pass_ok)
    readyz.add("watch", agent.health.watch_ok)
    readyz.add("writes", agent.health.writes_ok)
    return start_servers(
        metrics_address=str(options.metrics_bind or "0"),
        health_address=str(options.health_bind or "0"),
        registry=agent.metrics.registry,
        healthz=healthz,
        readyz=readyz,
    )


async def agent_main(
    options: AgentOptions,
    *,
    stop: asyncio.Event | None = None,
    netns: str | None = None,
    on_start: Callable[[Agent], None] | None = None,
) -> int:
    """Loop or run-once for validated ``options``. ``stop`` (default: SIGTERM/SIGINT) ends
    the loop; ``netns`` and ``on_start`` exist for in-process tests."""
    metrics = AgentMetrics()
    api, close = kube_api(options, metrics)
    agent = build_agent(options, api, metrics=metrics, netns=netns)
    try:
        if options.run_once:
            return await agent.run_once()
        servers = start_http(options, agent)
        try:
            if stop is None:
                stop = asyncio.Event()
                install_signal_handlers(stop)
            if on_start is not None:
                on_start(agent)
            return await serve_until(agent, stop)
        finally:
            servers.close()
    finally:
        # Requests still running in worker threads (an Event being sent) finish first: a
        # connection released into the pool after close() would never be closed.
        await asyncio.get_running_loop().shutdown_default_executor()
        close()


def run_agent(options: AgentOptions) -> int:
    """The CLI's entry point for loop and run-once modes; returns the exit code (§2.6)."""
    try:
        return asyncio.run(agent_main(options))
    except OSError as exc:  # e.g. a port that cannot be bound
        print(f"{names.AGENT}: {exc}", file=sys.stderr)
        return EXIT_FAILED

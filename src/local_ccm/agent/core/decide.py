"""The agent's pass as one decision: ``decide(node, detected, memory, setup, now)``.

The loop watches its one Node and, on a trigger, syncs it: it detects, then asks ``decide``
what to do. A :class:`Decision` holds at most one write (a status patch, an ownership
annotation patch, or one main-resource patch with the labels, the provider ID and the taint
removal), the Events, log lines and metric values, and the new :class:`Memory`. The loop
applies the write, records the API's answer in the memory (:meth:`Memory.answered`) and feeds
the Node the API returned back into ``decide``, until a decision holds no write: the pass ends.
So "addresses before the taint" follows from the data: the taint removal is decided only when
the Node already shows the addresses (gate 2), never from the order of calls.

The memory is everything the agent keeps between passes: the last detection, the write in
flight and what answered it, what it wrote (fights with another writer, ``core.fight``), a
replacement settling, the backoff, a write the API rejected as invalid, label conflicts already
reported. A new or vanished Node object starts its part (:class:`NodeMemory`) over.

Pure, no I/O, no clock: the moment and a random draw for the backoff's jitter come in ``now``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, replace
from datetime import datetime
from typing import Any, Literal

from local_ccm import names
from local_ccm.agent.core import events as ev
from local_ccm.agent.core import fight as ft
from local_ccm.agent.core import writes as pl
from local_ccm.agent.core.addresses import AddressPlan, NodeAddress
from local_ccm.agent.core.candidates import Detected, Disabled, Found
from local_ccm.agent.core.config import INTERNAL, AgentConfig, family_name
from local_ccm.agent.core.gates import Gates, decide_gates, desired_condition, gate_report
from local_ccm.agent.core.labels import (
    Conflict,
    LabelPlan,
    LabelSetup,
    address_ips,
    label_conflicts,
    plan_label_patch,
    plan_node_labels,
    with_labels,
)
from local_ccm.agent.core.timing import (
    API_BACKOFF,
    MAX_CONFLICTS,
    NO_INTERNAL_IP_WARNING_EVERY,
    Settle,
    is_due,
    settle_step,
)
from local_ccm.records import dataclass
from local_ccm.runtime.events import EventSpec, rfc3339

Obj = Mapping[str, Any]
Level = Literal["info", "warning", "error", "detail"]  # detail: --v=2
Outcome = Literal["written", "noop", "deferred", "failed"]  # passes_total{outcome}
RefusalKind = Literal["conflict", "invalid", "forbidden", "not_found", "error"]


# ------------------------------------------------------------------ inputs
@dataclass(frozen=True)
class Now:
    """The moment of a decision (monotonic and wall seconds) and a uniform draw in [0, 1)."""

    monotonic: float
    wall: datetime
    draw: float = 0.5


@dataclass(frozen=True)
class Setup:
    """What the operator configured, and what the process learned once at start-up."""

    agent: AgentConfig
    provider_id: str = ""  # --provider-id template
    fetched_provider_id: str | None = None  # from instance metadata (Azure)
    settle_time: float = 5.0
    labels: LabelSetup | None = None  # None: --metadata=false


@dataclass(frozen=True)
class Write:
    """One PATCH and what it is for: the loop sends ``patch``; the next decision reads the
    rest when the API answers."""

    patch: pl.Patch
    key: object  # the inputs: a write rejected as invalid is not sent again until they change
    kinds: tuple[str, ...]  # node_writes_total{kind}
    addresses: tuple[tuple[NodeAddress, ...], tuple[NodeAddress, ...]] | None = None  # old, new
    annotation: str | None = None  # the ownership value a status write carries
    taint: bool = False
    provider_id: str | None = None
    labels: LabelPlan | None = None


@dataclass(frozen=True)
class Refusal:
    """The API refused a write: the error's kind, message and Retry-After."""

    kind: RefusalKind
    message: str
    retry_after: float | None = None


@dataclass(frozen=True)
class Sent:
    write: Write
    answered: bool = False
    refusal: Refusal | None = None


@dataclass(frozen=True)
class NodeMemory:
    """What is remembered about one Node object (its uid); a new or vanished one starts over."""

    uid: str = ""
    fight: ft.FightState = field(default_factory=ft.FightState)
    conflict_manager: str | None = None  # set while address writes pause for a fight
    settle: Settle | None = None
    rejected: object = None  # the key of a write the API rejected as invalid
    label_conflicts: frozenset[Conflict] = frozenset()  # reported on this Node object
    # The label setup the API refused for this Node object: paused until the setup changes (a
    # re-created Node is tried again; the refusal may have been about the old one's labels).
    labels_refused: LabelSetup | None = None


@dataclass(frozen=True)
class Memory:
    """Everything the agent remembers between decisions."""

    detected: Detected | None = None
    node: NodeMemory = field(default_factory=NodeMemory)
    sent: Sent | None = None  # the write decided last, until the next decision reads its answer
    wrote: bool = False  # a write of this pass succeeded
    conflicts: int = 0  # conflicts in this pass
    failures: int = 0  # consecutive failed passes: the backoff's attempt
    retry_at: float = 0.0  # monotonic: no write before (a backoff)
    forbidden: str | None = None  # the last write was forbidden (readiness)
    annotation_on_main: bool = False  # the apiserver dropped the annotation from a status write
    initialized: frozenset[str] = frozenset()  # uids whose taint removal was seen
    no_ip_warned_at: float | None = None

    def answered(self, refusal: Refusal | None) -> Memory:
        """The API's answer to the write in flight (``None``: it was stored)."""
        if self.sent is None:
            return self
        return replace(self, sent=Sent(self.sent.write, answered=True, refusal=refusal))


# ------------------------------------------------------------------ outputs
@dataclass(frozen=True)
class Gauges:
    """Metric values of a decision; None (or empty) leaves a metric as it is."""

    blocked: Mapping[str, int] | None = None  # initialization_blocked{reason}
    mismatch: Mapping[str, int] | None = None  # provided_node_ip_mismatch{family}
    conflict: int | None = None  # address_conflict
    kept: tuple[tuple[str, int, str], ...] = ()  # detected_address_info{source="kept"}
    reverts: int = 0  # address_reverts_total increment
    synced_at: float | None = None  # last_sync_timestamp_seconds
    taint_delay: float | None = None  # taint_removal_delay_seconds observation


@dataclass(frozen=True)
class Decision:
    write: Write | None
    memory: Memory
    outcome: Outcome | None = None  # set when the pass ends (no write)
    events: tuple[EventSpec, ...] = ()  # about the Node
    reported: tuple[EventSpec, ...] = ()  # Events whose Warning is logged when one is sent
    logs: tuple[tuple[Level, str], ...] = ()
    gauges: Gauges = field(default_factory=Gauges)
    retry_in: float | None = None  # a "retry" trigger after this many seconds


class _Out:
    """What a decision says besides its write, collected while it is made."""

    def __init__(self) -> None:
        self.events: list[EventSpec] = []
        self.reported: list[EventSpec] = []
        self.logs: list[tuple[Level, str]] = []
        self.gauges = Gauges()
        self.retry_in: float | None = None

    def say(self, level: Level, message: str, event: EventSpec | None = None) -> None:
        self.logs.append((level, message))
        if event is not None:
            self.events.append(event)

    def gauge(self, **values: Any) -> None:
        self.gauges = replace(self.gauges, **values)

    def decision(
        self, write: Write | None, memory: Memory, outcome: Outcome | None = None
    ) -> Decision:
        return Decision(
            write, memory, outcome, tuple(self.events), tuple(self.reported), tuple(self.logs),
            self.gauges, self.retry_in,
        )  # fmt: skip


@dataclass(frozen=True)
class _View:
    """One decision's Node, with what this pass makes of it: the plan and the gates."""

    node: Obj
    plan: AddressPlan
    gates: Gates
    detected: Detected
    setup: Setup
    now: Now


_FORGET = {"blocked": dict.fromkeys(("no_internal_ip", "provided_node_ip_mismatch",
                                     "provider_id_unavailable"), 0), "conflict": 0}  # fmt: skip


# ------------------------------------------------------------------ the decision
def decide(
    node: Obj | None, detected: Detected, memory: Memory, setup: Setup, now: Now
) -> Decision:
    """What to do next for ``node`` (None: absent) given this pass's detection."""
    out = _Out()
    memory = _observe_detection(memory, detected, setup.agent, out)
    memory, failed = _read_answer(memory, node, setup, now, out)
    if failed:
        return out.decision(None, _end_pass(memory), "failed")
    if node is None:
        if memory.node.uid:
            out.gauge(**_FORGET)
        return out.decision(None, _end_pass(replace(memory, node=NodeMemory())), "noop")
    if pl.node_uid(node) != memory.node.uid:
        memory = replace(memory, node=NodeMemory(uid=pl.node_uid(node)))
        out.gauge(**_FORGET)
    if now.monotonic < memory.retry_at:
        return out.decision(None, _end_pass(memory), "deferred")  # backing off
    plan = pl.plan_addresses(node, detected, setup.agent)
    memory = _fight(memory, node, plan, now.monotonic, out)
    kept = [f for f in plan.findings if f.kind == "kept_last_good"]
    out.gauge(kept=tuple((f.type, f.family, f.address) for f in kept if f.type and f.family))
    gates = decide_gates(node, plan, setup.agent, template=setup.provider_id,
                         fetched=setup.fetched_provider_id)  # fmt: skip
    view = _View(node, plan, gates, detected, setup, now)
    memory, write, settling = _status(memory, view, out)
    if write is None:
        memory, write = _main(memory, view, out)
    if write is not None:
        return out.decision(write, replace(memory, sent=Sent(write)))
    memory = _after_pass(memory, view, out)
    outcome: Outcome = "written" if memory.wrote else "deferred" if settling else "noop"
    memory = replace(_end_pass(memory), failures=0, forbidden=None)
    return out.decision(None, memory, outcome)


def _end_pass(memory: Memory) -> Memory:
    return replace(memory, wrote=False, conflicts=0, sent=None)


def _observe_detection(
    memory: Memory, detected: Detected, config: AgentConfig, out: _Out
) -> Memory:
    """Detector results at --v=2 when they change; an Event per failure and recovery."""
    if detected == memory.detected:
        return memory
    for (kind, family), d in sorted(detected.items()):
        out.say("detail", f"detector {kind} {family_name(family)}: {d}")
    for spec in ev.detection_events(memory.detected, detected, config):
        out.say("warning" if spec.type == "Warning" else "info", spec.message, spec)
    return replace(memory, detected=detected)


# ------------------------------------------------------------------ the answer to a write
def _read_answer(
    memory: Memory, node: Obj | None, setup: Setup, now: Now, out: _Out
) -> tuple[Memory, bool]:
    """The effects of the write in flight: what its success shows, or the error policy for a
    refusal. True: the pass ends failed."""
    sent, memory = memory.sent, replace(memory, sent=None)
    if sent is None or not sent.answered:
        return memory, False  # nothing in flight, or a pass that ended without an answer
    if sent.refusal is None:
        return _written(replace(memory, wrote=True), sent.write, node, now, out), False
    return _refused(memory, sent, setup.labels, now, out)


def _written(memory: Memory, write: Write, node: Obj | None, now: Now, out: _Out) -> Memory:
    if node is None:
        return memory
    if write.addresses is not None:
        old, new = write.addresses
        fight = ft.fight_record_write(memory.node.fight, new, pl.node_rv(node), now.monotonic)
        memory = replace(memory, node=replace(memory.node, fight=fight))
        change = ev.addresses_updated(old, new)
        if change is not None:
            out.say("info", f"addresses updated: {change.message}", change)
        stored = pl.owned_annotation(node)
        if write.annotation is not None and stored != write.annotation:
            out.say("error", f"the status write did not store annotation "
                    f"{names.OWNED_ADDRESSES_ANNOTATION} (got {stored!r}); writing it on the "
                    "Node itself from now on")  # fmt: skip
            memory = replace(memory, annotation_on_main=True)
    if write.provider_id:
        out.say("info", f"set spec.providerID to {write.provider_id}",
                ev.provider_id_set(write.provider_id))  # fmt: skip
    if write.labels is not None and write.labels.changes:
        out.say("info", f"labels set {dict(write.labels.set)}, removed {list(write.labels.remove)}")
    if write.taint:
        delay, uid = creation_delay(node, now.wall), pl.node_uid(node)
        if uid not in memory.initialized:
            memory = replace(memory, initialized=memory.initialized | {uid})
            out.gauge(taint_delay=delay)
        out.say("info", f"removed taint {names.UNINITIALIZED_TAINT}", ev.node_initialized(delay))
    return memory


def _refused(
    memory: Memory, sent: Sent, labels: LabelSetup | None, now: Now, out: _Out
) -> tuple[Memory, bool]:
    """Conflicts re-read (the loop did) and decide again; an invalid write waits for new
    inputs; forbidden and other errors back off."""
    write, refusal = sent.write, sent.refusal
    assert refusal is not None
    if refusal.kind == "conflict":
        conflicts = memory.conflicts + 1
        if conflicts < MAX_CONFLICTS:
            return replace(memory, conflicts=conflicts), False
        out.say("warning", f"{MAX_CONFLICTS} conflicts in a row; backing off")
        return _back_off(memory, None, now, out), True
    if refusal.kind == "not_found":
        return memory, False  # the loop forgot the Node: the decision sees it absent
    if refusal.kind in ("invalid", "forbidden"):
        what = f"PATCH of {'/'.join(write.kinds)}"
        out.events.append(ev.update_rejected(what, refusal.message))
        if write.labels is not None and labels is not None:  # never hold the taint for them
            out.say("error", "metadata labels refused by the API server, paused until the "
                    f"rules change: {refusal.message}")  # fmt: skip
            memory = replace(memory, node=replace(memory.node, labels_refused=labels))
    if refusal.kind == "invalid":
        out.say("warning", f"write rejected: {refusal.message}")
        return replace(memory, node=replace(memory.node, rejected=write.key)), True
    if refusal.kind == "forbidden":
        out.say("error", f"write forbidden: {refusal.message}")
        memory = replace(memory, forbidden=refusal.message)
    else:
        out.say("warning", f"API error: {refusal.message}")
    return _back_off(memory, refusal.retry_after, now, out), True


def _back_off(memory: Memory, retry_after: float | None, now: Now, out: _Out) -> Memory:
    delay = API_BACKOFF.next_delay(memory.failures, retry_after, _Draw(now.draw))
    out.say("detail", f"retrying in {delay:.1f}s")
    out.retry_in = delay
    return replace(memory, failures=memory.failures + 1, retry_at=now.monotonic + delay)


class _Draw:
    """``now.draw`` as the random source of ``Backoff.next_delay``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


# ------------------------------------------------------------------ address fights
def _fight(memory: Memory, node: Obj, plan: AddressPlan, now: float, out: _Out) -> Memory:
    """Did another writer undo the addresses written last (a newer Node whose list differs
    and would be written again)? And has a paused fight resolved?"""
    state, manager = memory.node.fight, memory.node.conflict_manager
    if state.written is not None:
        state, what = ft.fight_observe(
            state, addresses=pl.current_addresses(node), rv=pl.node_rv(node),
            would_write=not pl.addresses_match(node, plan), now=now,
        )  # fmt: skip
        if what is not None:
            out.gauge(reverts=1)
        if what == "conflict_entered":
            manager = ft.last_address_writer(node) or "another writer"
            out.gauge(conflict=1)
            out.say("warning", f"status.addresses keeps being reverted by {manager}; pausing "
                    "address writes", ev.conflict_entered(manager))  # fmt: skip
    state, what = ft.fight_tick(state, now)
    if what == "conflict_resolved":
        manager = None
        out.gauge(conflict=0)
        out.say("info", "address conflict resolved", ev.conflict_resolved())
    return replace(memory, node=replace(memory.node, fight=state, conflict_manager=manager))


# ------------------------------------------------------------------ status
def _status(memory: Memory, view: _View, out: _Out) -> tuple[Memory, Write | None, bool]:
    """The ownership annotation (where the apiserver drops it from status), else the status
    patch: addresses (unless a fight pauses them or a replacement settles) and the condition.
    True: a replacement is settling."""
    node, plan, gates, setup, now = view.node, view.plan, view.gates, view.setup, view.now
    mine, on_main = memory.node, memory.annotation_on_main
    may_write = ft.fight_may_write(mine.fight, now.monotonic)
    settling = False
    if may_write:
        settle, wait = plan_settle(mine.settle, node, plan, now.monotonic, setup.settle_time)
        memory = replace(memory, node=replace(mine, settle=settle))
        if wait > 0:
            out.say("detail", f"address change settling for {wait:.1f}s")
            out.retry_in = wait
            return memory, None, True
    if may_write and on_main:
        patch = pl.plan_annotation_patch(node, plan)
        if patch is not None and ("annotation", plan.annotation) != mine.rejected:
            write = Write(patch, ("annotation", plan.annotation), tuple(pl.patch_kinds(patch)))
            return memory, write, False
    condition = None
    if setup.agent.report_condition:
        manager = mine.conflict_manager if mine.fight.conflict else None
        condition = desired_condition(
            plan, view.detected, blocked=gates.taint.blocked, conflict_manager=manager,
            no_internal_ip=gates.advice,
        )  # fmt: skip
    patch = pl.plan_status_patch(
        node, plan, condition=condition, now=rfc3339(now.wall), write_addresses=may_write,
        with_annotation=not on_main,
    )  # fmt: skip
    key = ("status", plan.addresses, plan.annotation, condition, may_write)
    if patch is None or key == mine.rejected:
        return memory, None, settling
    write = Write(patch, key, tuple(pl.patch_kinds(patch)))
    if "/status/addresses" in {op["path"] for op in patch.operations}:
        old = pl.current_addresses(node)
        write = replace(write, addresses=(old, plan.addresses),
                        annotation=None if on_main else plan.annotation)  # fmt: skip
    return memory, write, settling


def is_settle_needed(node: Obj, plan: AddressPlan) -> bool:
    """The plan removes or replaces an owned address already on the (initialised)
    Node. The first write (nothing owned yet, or still tainted) is immediate."""
    inputs = pl.node_inputs(node)
    if pl.is_tainted(node) or not inputs.owned:
        return False
    current, desired = {a.key for a in inputs.current}, {a.key for a in plan.addresses}
    return any(o.key in current and o.key not in desired for o in inputs.owned)


def plan_settle(
    settle: Settle | None, node: Obj, plan: AddressPlan, now: float, settle_time: float
) -> tuple[Settle | None, float]:
    """:func:`~local_ccm.agent.core.timing.settle_step` when the plan needs to settle."""
    if not is_settle_needed(node, plan):
        return None, 0.0
    return settle_step(settle, plan.owned, now, settle_time)


# ------------------------------------------------------------------ labels, provider ID, taint
def _main(memory: Memory, view: _View, out: _Out) -> tuple[Memory, Write | None]:
    """One main-resource write: labels first, then the provider ID and the taint removal (the
    gates already hold the taint until the Node shows the addresses)."""
    node, plan, gates, setup = view.node, view.plan, view.gates, view.setup
    report = gate_report(node, plan, gates)
    out.gauge(blocked=report.blocked, mismatch=report.mismatch)
    out.reported.extend(report.events)
    remove = gates.taint.remove
    value = gates.provider.value if gates.provider.kind == "set" else None
    patch = pl.plan_taint_patch(node, remove_taint=remove, provider_id=value)
    labels = None
    if setup.labels is not None and setup.labels != memory.node.labels_refused:
        mine = setup.labels
        labels = plan_node_labels(node, address_ips(plan.addresses), mine.rules, mine.facts,
                                  beta=mine.beta, domains=mine.domains)  # fmt: skip
        events, reported = label_conflicts(labels.conflicts, memory.node.label_conflicts)
        for spec in events:
            out.say("warning", f"{spec.reason}: {spec.message}", spec)
        memory = replace(memory, node=replace(memory.node, label_conflicts=reported))
        patch = with_labels(patch, plan_label_patch(node, labels))
    key = ("main", remove, value, labels and (labels.set, labels.remove, labels.owned))
    if patch is None or key == memory.node.rejected:
        return memory, None
    label_ops = labels is not None and any(
        str(op["path"]).startswith("/metadata/") for op in patch.operations if op["op"] != "test"
    )
    write = Write(patch, key, tuple(pl.patch_kinds(patch)), taint=remove, provider_id=value,
                  labels=labels if label_ops else None)  # fmt: skip
    return memory, write


# ------------------------------------------------------------------ the end of a pass
def _after_pass(memory: Memory, view: _View, out: _Out) -> Memory:
    """The Node matches (the sync timestamp), and a rate-limited warning for a Node that was
    initialised without an InternalIP."""
    node, plan, now = view.node, view.plan, view.now
    tainted = pl.is_tainted(node)
    if pl.addresses_match(node, plan) and not tainted:
        out.gauge(synced_at=now.wall.timestamp())
    no_internal = not any(a.type == INTERNAL for a in pl.current_addresses(node))
    every = NO_INTERNAL_IP_WARNING_EVERY
    if no_internal and not tainted and is_due(memory.no_ip_warned_at, now.monotonic, every):
        advice = view.gates.advice
        out.say(
            "warning", f"the Node is initialised without an InternalIP (NoInternalIP): {advice}"
        )
        memory = replace(memory, no_ip_warned_at=now.monotonic)
    return memory


def creation_delay(node: Obj, now: datetime) -> float | None:
    """Seconds since ``metadata.creationTimestamp``, for the NodeInitialized Event and the
    time-to-initialise histogram."""
    created = (node.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return None
    born = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    return max(0.0, (now - born).total_seconds())


# ------------------------------------------------------------------ run-once
def unmet_run_once(
    node: Obj, plan: AddressPlan, detected: Detected, config: AgentConfig, provider_id: str
) -> list[str]:
    """The reasons run-once did not reach the final state (empty = exit 0); ``provider_id``
    is the configured template or the fetched value ("" = none)."""
    unmet = []
    if not pl.addresses_match(node, plan):
        unmet.append("status.addresses differ from the desired list")
    for (kind, family), d in sorted(detected.items()):
        if not isinstance(d, Found | Disabled):
            unmet.append(f"{kind} {family_name(family)} detection failed: {d.reason} {d.detail}")
    if config.remove_taint and pl.is_tainted(node):
        unmet.append(f"taint {names.UNINITIALIZED_TAINT} is still present")
    if provider_id and not (node.get("spec") or {}).get("providerID"):
        unmet.append("spec.providerID is not set")
    return unmet

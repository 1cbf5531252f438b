"""Builders, a `FakeProber` and a pure pipeline simulator for the lifecycle unit tests.

`Sim` plays the loop's part around the pure core: assess, plan, feed
probe verdicts back, re-check and "delete". Time is two plain numbers it advances by hand, so
nothing sleeps.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from ipaddress import ip_address
from typing import Any

from local_ccm.clock import Clock
from local_ccm.lifecycle.core.bmc import BmcView, PowerOffRecord, request_value
from local_ccm.lifecycle.core.deletions import plan_deletions
from local_ccm.lifecycle.core.health import Episode, Scope, assess, recheck
from local_ccm.lifecycle.core.model import (
    IPAddress,
    NodeView,
    OutcomeKind,
    ProbeKind,
    ProbeOutcome,
    combine,
    project_node,
)
from local_ccm.lifecycle.core.state import (
    EventAction,
    PipelineSettings,
    PipelineState,
    Plan,
    forget,
    record_attempt,
    record_fence,
    record_probe,
    record_self_check,
)
from local_ccm.lifecycle.health import Check, add_checks
from local_ccm.runtime import process
from local_ccm.runtime.events import rfc3339 as format_time
from local_ccm.runtime.serve import Checks

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
AUTOSCALER = {
    "key": "ToBeDeletedByClusterAutoscaler",
    "value": "1763726400",
    "effect": "NoSchedule",
}
CONTROL_PLANE = {"node-role.kubernetes.io/control-plane": ""}


def raw_node(
    name: str,
    *,
    uid: str | None = None,
    ready: str | None = "Unknown",
    since: datetime | None = None,
    created: datetime | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (AUTOSCALER,),
    addresses: Sequence[tuple[str, str]] = (("InternalIP", "198.51.100.9"),),
    deleting: datetime | None = None,
    resource_version: str = "1",
) -> dict[str, Any]:
    """A Node as the API returns it; by default an "eligible" Node (Ready=Unknown for 60 s,
    with the autoscaler's deletion taint)."""
    meta: dict[str, Any] = {
        "name": name,
        "uid": uid or f"uid-{name}",
        "resourceVersion": resource_version,
        "creationTimestamp": format_time(created or NOW - timedelta(hours=1)),
    }
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    if deleting is not None:
        meta["deletionTimestamp"] = format_time(deleting)
    conditions = []
    if ready is not None:
        when = format_time(since or NOW - timedelta(seconds=60))
        conditions.append({"type": "Ready", "status": ready, "lastTransitionTime": when})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        "status": {
            "conditions": conditions,
            "addresses": [{"type": t, "address": a} for t, a in addresses],
        },
    }


def node(name: str, **kwargs: Any) -> NodeView:
    return project_node(raw_node(name, **kwargs))


def bmc_view(
    name: str,
    power: str = "On",
    *,
    at: datetime = NOW,
    request: str | None = None,
    record: PowerOffRecord | None = None,
    generation: int = 1,
) -> BmcView:
    """A NodeBMC as node-bmc leaves it after a poll at `at`: Absent is its 404, Unknown no
    answer, anything else a read."""
    reachable, reason = {
        "Absent": ("False", "SystemNotFound"),
        "Unknown": ("False", "Unreachable"),
    }.get(power, ("True", "Contacted"))
    return BmcView(name, f"b-{name}", "1", generation=1, observed_generation=generation,
                   power=power, reachable=reachable, reason=reason, last_contact=at,
                   request=request, record=record)  # fmt: skip


class FakeProber:
    """A `Prober` answering from a table of outcomes per address (default `no_reply`)."""

    def __init__(self, outcomes: Mapping[str, OutcomeKind] | None = None) -> None:
        self.outcomes = dict(outcomes or {})
        self.calls: list[tuple[tuple[IPAddress, ...], tuple[ProbeKind, ...]]] = []

    def outcome(self, address: IPAddress, kind: ProbeKind) -> ProbeOutcome:
        return ProbeOutcome(address, kind, self.outcomes.get(str(address), "no_reply"))

    async def probe(
        self, addresses: Sequence[IPAddress], kinds: Sequence[ProbeKind]
    ) -> tuple[ProbeOutcome, ...]:
        self.calls.append((tuple(addresses), tuple(kinds)))
        results = []
        for address in addresses:
            for kind in kinds:
                results.append(self.outcome(address, kind))
                if results[-1].outcome == "reply":
                    return tuple(results)
        return tuple(results)


@dataclass
class Sim:
    """The loop around the pure core, synchronous, with probes finishing instantly."""

    nodes: list[NodeView]
    settings: PipelineSettings
    scope: Scope = field(default_factory=Scope)
    timeout: float = 10.0
    prober: FakeProber = field(default_factory=FakeProber)
    mono: float = 1000.0
    wall: datetime = NOW
    state: PipelineState = field(default_factory=PipelineState)
    episodes: Mapping[str, Episode] = field(default_factory=dict)
    ready_seen: Mapping[str, float] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    deleted: list[tuple[float, str]] = field(default_factory=list)
    dry_runs: list[str] = field(default_factory=list)
    events: list[EventAction] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    aborts: list[tuple[str, str]] = field(default_factory=list)
    probe_batches: int = 0
    bmcs: dict[str, BmcView] | None = None  # None: NodeBMCs are not read
    fenced: list[str] = field(default_factory=list)

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += timedelta(seconds=seconds)

    def evaluate(self) -> Plan:
        """Assess and plan once (no probes finish)."""
        assessment = assess(self.nodes, self.scope, self.episodes, self.wall, self.timeout,
                            mono=self.mono, ready_seen=self.ready_seen)  # fmt: skip
        self.episodes = assessment.episodes.episodes
        self.ready_seen = assessment.episodes.ready_seen
        state = forget(self.state, assessment.episodes.ended)
        plan = plan_deletions(
            assessment, nodes=self.nodes, scope=self.scope, state=state,
            settings=self.settings, now=self.mono, rng=self.rng, bmcs=self.bmcs,
            wall=self.wall,
        )  # fmt: skip
        self.state = plan.state
        self.events.extend(plan.events)
        self.plans.append(plan)
        return plan

    def finish_probes(self, plan: Plan) -> None:
        for request in plan.probes:
            outcomes = [self.prober.outcome(a, k) for a in request.addresses for k in request.kinds]
            self.probe_batches += 1
            self.state = record_probe(self.state, request.uid, outcomes, self.mono)
        if plan.self_check_probes:
            verdicts = [
                combine([self.prober.outcome(a, k) for a in r.addresses for k in r.kinds])
                for r in plan.self_check_probes
            ]
            peers = [r.name for r in plan.self_check_probes]
            self.state = record_self_check(self.state, peers, verdicts, self.mono)

    def perform(self, plan: Plan) -> None:
        for fence in plan.fences:  # the request written at once (node-bmc's part is the test's)
            assert self.bmcs is not None
            request = request_value(fence.uid, self.wall)
            self.bmcs[fence.name] = dataclasses.replace(self.bmcs[fence.name], request=request)
            self.fenced.append(fence.name)
            self.state = record_fence(self.state, fence.uid, "requested")
        for action in plan.deletions:
            fresh = next((n for n in self.nodes if n.name == action.name), None)
            abort = recheck(
                fresh, action.uid, self.scope, episode=self.episodes.get(action.uid),
                now=self.wall, timeout=self.timeout, breaker_open=plan.breaker.open,
                mono=self.mono,
            )  # fmt: skip
            if abort is not None:
                self.aborts.append((action.name, abort.check))
                self.state = record_attempt(self.state, action.uid, abort.result)
            elif action.dry_run:
                self.dry_runs.append(action.name)
                self.state = record_attempt(self.state, action.uid, "dry_run")
            else:
                self.nodes = [n for n in self.nodes if n.uid != action.uid]
                self.deleted.append((self.mono, action.name))
                self.state = record_attempt(self.state, action.uid, "deleted")

    def tick(self, seconds: float = 0.0, rounds: int = 3) -> Plan:
        """Advance, then evaluate and act `rounds` times: a finished probe triggers the next
        evaluation at once, as in the loop."""
        self.advance(seconds)
        for _ in range(rounds):
            plan = self.evaluate()
            self.finish_probes(plan)
            self.perform(plan)
        return plan

    def run(self, seconds: float, step: float = 1.0) -> None:
        for _ in range(int(seconds / step)):
            self.tick(step)

    def replace(self, name: str, new: NodeView) -> None:
        self.nodes = [new if n.name == name else n for n in self.nodes]

    def event_reasons(self, name: str | None = None) -> list[str]:
        return [e.reason for e in self.events if name is None or e.name == name]

    def deleted_names(self) -> list[str]:
        return [name for _, name in self.deleted]


def addresses(*texts: str) -> tuple[IPAddress, ...]:
    return tuple(ip_address(t) for t in texts)


def names_of(nodes: Iterable[NodeView]) -> list[str]:
    return sorted(n.name for n in nodes)


def health_checks(
    status: process.Status,
    clock: Clock,
    *,
    probe_problem: str = "",
    evaluating: Check = lambda: (True, ""),
) -> tuple[Checks, Checks]:
    """(/healthz, /readyz) as the binary wires them: the runtime's and the lifecycle unit's
    own (its controller's `ready()`, /readyz `node-cache`, comes with the kit's unit)."""
    healthz, readyz = process.process_checks(status, clock)
    add_checks(healthz, readyz, evaluating=evaluating, probe_problem=probe_problem)
    return healthz, readyz

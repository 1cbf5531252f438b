"""What the deletion pipeline decides: the circuit breaker, probe freshness, the rate limit,
the self-check peers, and the walk over the eligible Nodes.

Pure, no I/O, no clock: `now` is monotonic seconds, always passed in. `plan_deletions` returns
what to do as data (`lifecycle.core.state`); the loop performs it and reports back.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from local_ccm.lifecycle.core import events as ev
from local_ccm.lifecycle.core.health import Assessment, Health, Scope
from local_ccm.lifecycle.core.model import IPAddress, NodeView, summarize
from local_ccm.lifecycle.core.state import (
    Attempt,
    Breaker,
    Decision,
    DeleteAction,
    EventAction,
    PipelineSettings,
    PipelineState,
    Plan,
    ProbeRecord,
    ProbeRequest,
    SelfCheck,
    SkipReason,
    Step,
)
from local_ccm.runtime.events import rfc3339
from local_ccm.validate import CountOrPercent


# ------------------------------------------------------------------ gates
def breaker_threshold(limit: CountOrPercent, population: int) -> int:
    """The breaker's threshold T: K, or max(1, ⌊P × N / 100⌋), except that 0% gives 0."""
    if not limit.percent:
        return limit.value
    if limit.value == 0:
        return 0
    return max(1, limit.value * population // 100)


def breaker(limit: CountOrPercent, population: int, unhealthy: int) -> Breaker:
    threshold = breaker_threshold(limit, population)
    return Breaker(unhealthy > threshold, unhealthy, threshold, population)


def is_fresh(record: ProbeRecord | None, now: float, interval: float) -> bool:
    """A verdict is valid for one interval after it completed."""
    return record is not None and record.finished is not None and now - record.finished < interval


def may_start_probe(record: ProbeRecord | None, now: float, interval: float) -> bool:
    """At most one probe per interval (start to start), never two at once."""
    return record is None or (not record.running and now - record.started >= interval)


def rate_tokens(starts: Iterable[float], now: float, interval: float, limit: int) -> int:
    """Deletions that may still start in the sliding window (now − interval, now]."""
    return max(0, limit - sum(1 for t in starts if now - t < interval))


def self_check_peers(
    nodes: Iterable[NodeView], scope: Scope, settings: PipelineSettings, rng: random.Random
) -> tuple[NodeView, ...]:
    """Up to `self_check_sample` random Ready peers, not the own node, not terminating, with a
    probeable address; control-plane Nodes may be peers."""
    peers = sorted(
        (
            n
            for n in nodes
            if n.ready == "True"
            and n.deletion_timestamp is None
            and n.name != scope.own_node
            and settings.addresses(n)
        ),
        key=lambda n: n.name,
    )
    return tuple(rng.sample(peers, min(settings.self_check_sample, len(peers))))


# ------------------------------------------------------------------ the walk
def plan_deletions(
    assessment: Assessment,
    *,
    nodes: Sequence[NodeView],
    scope: Scope,
    state: PipelineState,
    settings: PipelineSettings,
    now: float,
    rng: random.Random,
) -> Plan:
    """Breaker, probe verdict, self-check and rate limit for every eligible Node, oldest `t0`
    first. `nodes` is the whole cache (self-check peers may be outside the scope)."""
    walk = _Walk(assessment, nodes, scope, state, settings, now=now, rng=rng)
    for health in assessment.eligible:
        walk.step(health)
    return walk.plan()


class _Walk:
    """Mutable scratch state of one `plan_deletions` call; never escapes it."""

    def __init__(self, assessment: Assessment, nodes: Sequence[NodeView], scope: Scope,
                 state: PipelineState, settings: PipelineSettings, *, now: float,
                 rng: random.Random) -> None:  # fmt: skip
        self.nodes, self.scope, self.settings, self.now, self.rng = nodes, scope, settings, now, rng
        self.breaker = breaker(settings.max_unhealthy, assessment.population, assessment.unhealthy)
        closed_at = now if state.breaker_open and not self.breaker.open else state.breaker_closed_at
        eligible = {h.node.uid for h in assessment.eligible}
        # A verdict counts only if its probe started after the Node became eligible:
        # records of Nodes that stopped being eligible are dropped, late results ignored.
        self.state = replace(
            state,
            probes={uid: r for uid, r in state.probes.items() if uid in eligible},
            starts=tuple(s for s in state.starts if now - s[0] < settings.interval),
            breaker_open=self.breaker.open,
            breaker_closed_at=closed_at,
        )
        self.announced, self.skipped = set(state.announced), set(state.skipped)
        self.probes = dict(self.state.probes)
        self.decisions: list[Decision] = []
        self.requests: list[ProbeRequest] = []
        self.peer_requests: list[ProbeRequest] = []
        self.events: list[EventAction] = []
        self.skips: list[tuple[str, SkipReason]] = []
        self.deletions: list[DeleteAction] = []

    def plan(self) -> Plan:
        starts = self.state.starts + tuple((self.now, d.uid) for d in self.deletions)
        attempts: dict[str, Attempt] = dict(self.state.attempts)
        attempts.update((d.uid, "running") for d in self.deletions)
        state = replace(
            self.state,
            probes=self.probes,
            starts=starts,
            attempts=attempts,
            self_check_pending=self.state.self_check_pending or bool(self.peer_requests),
            announced=frozenset(self.announced),
            skipped=frozenset(self.skipped),
        )
        return Plan(
            state, self.breaker, tuple(self.decisions), tuple(self.requests),
            tuple(self.peer_requests), tuple(self.events), tuple(self.skips),
            tuple(self.deletions),
        )  # fmt: skip

    def step(self, health: Health) -> None:
        attempt = self.state.attempts.get(health.node.uid)
        if attempt is not None:
            self.decide(health, "in_progress" if attempt == "running" else "dry_run_done")
        elif self.breaker.open:  # checked before probing
            self.skip(health, "breaker_open", ev.BLOCKED_BY_CIRCUIT_BREAKER, str(self.breaker))
        elif self.verdict(health) and self.self_check_passed(health):
            self.gate(health)

    def gate(self, health: Health) -> None:
        closed_at = self.state.breaker_closed_at
        if closed_at is not None and self.now - closed_at < self.settings.interval:
            self.decide(health, "breaker_hold")  # deletions resume one interval after it closed
            return
        tokens = rate_tokens((s[0] for s in self.state.starts), self.now, self.settings.interval,
                             self.settings.max_deletions) - len(self.deletions)  # fmt: skip
        if tokens <= 0:
            message = f"at most {self.settings.max_deletions} deletion(s) per interval"
            self.skip(health, "rate_limited", ev.RATE_LIMITED, message)
            return
        self.decide(health, "delete")
        self.deletions.append(self.delete_action(health))

    def delete_action(self, health: Health) -> DeleteAction:
        record = self.probes.get(health.node.uid)
        summary = (
            "unprobed mode"
            if self.settings.unprobed
            else summarize(record.outcomes if record else ())
        )
        assert health.t0 is not None  # eligible Nodes always have one
        return DeleteAction(
            health.node.uid, health.node.name, health.t0, health.age, summary,
            self.settings.dry_run, self.settings.out_of_service_taint,
        )  # fmt: skip

    def verdict(self, health: Health) -> bool:
        """True when the verdict is a fresh `unreachable`."""
        if self.settings.unprobed:
            return True  # unprobed mode: taken as unreachable without sending anything
        node = health.node
        addresses = self.settings.addresses(node)
        if not addresses:
            message = _no_address_message(node, self.settings)
            self.skip(health, "unknown", ev.NO_PROBE_ADDRESS, message, "no_address")
            return False
        record = self.probes.get(node.uid)
        if may_start_probe(record, self.now, self.settings.interval):
            self.start_probe(health, addresses, record)
        if record is None or not is_fresh(record, self.now, self.settings.interval):
            self.decide(health, "probing")
            return False
        return self.judge(health, record)

    def judge(self, health: Health, record: ProbeRecord) -> bool:
        """A fresh verdict: `reachable` and `unknown` stop the Node with their Event."""
        verdict = record.verdict
        if verdict == "reachable":
            replied = [o for o in record.outcomes if o.outcome == "reply"]
            self.skip(health, "reachable", ev.NODE_REACHABLE, summarize(replied[:1]))
        elif verdict == "unknown":
            self.skip(health, "unknown", ev.PROBE_FAILED, summarize(record.outcomes))
        return verdict == "unreachable"

    def start_probe(
        self, health: Health, addresses: tuple[IPAddress, ...], record: ProbeRecord | None
    ) -> None:
        node, kinds = health.node, self.settings.kinds
        self.requests.append(ProbeRequest(node.uid, node.name, addresses, kinds))
        # The previous verdict stays readable until this probe completes.
        fresh = ProbeRecord(self.now)
        self.probes[node.uid] = replace(record, started=self.now, running=True) if record else fresh
        message = (
            f"NotReady since {rfc3339(health.t0 or datetime.min)} ({health.age:.0f}s); "
            f"probing {', '.join(map(str, addresses))} with {', '.join(map(str, kinds))}"
        )
        self.announce(health, ev.CHECKING_REACHABILITY, message)

    def self_check_passed(self, health: Health) -> bool:
        """A fresh passed or skipped self-check; otherwise request one or block."""
        if not self.settings.self_check or self.settings.unprobed:
            return True
        check = self.state.self_check
        if check is not None and self.now - check.at < self.settings.interval:
            if check.result != "failed":
                return True
            message = f"no reachable peer among {', '.join(check.peers)}"
            self.skip(health, "self_check_failed", ev.BLOCKED_BY_SELF_CHECK, message)
            return False
        requested = self.state.self_check_pending or self.peer_requests
        if not requested and not self.request_self_check():
            return True
        self.decide(health, "self_check_pending")
        return False

    def request_self_check(self) -> bool:
        """Choose peers and ask for their probes; False when there is no peer (skipped)."""
        peers = self_check_peers(self.nodes, self.scope, self.settings, self.rng)
        if not peers:
            self.state = replace(self.state, self_check=SelfCheck(self.now, "skipped"))
            return False
        self.peer_requests.extend(
            ProbeRequest(p.uid, p.name, self.settings.addresses(p), self.settings.kinds)
            for p in peers
        )
        return True

    def decide(self, health: Health, step: Step) -> None:
        self.decisions.append(Decision(health.node.uid, health.node.name, step))

    def skip(
        self, health: Health, reason: SkipReason, event: str, message: str, step: Step | None = None
    ) -> None:
        """Count the skip once per episode, announce it and stop the walk at `step`."""
        if (health.node.uid, reason) not in self.skipped:
            self.skipped.add((health.node.uid, reason))
            self.skips.append((health.node.uid, reason))
        self.announce(health, event, message)
        self.decide(health, step or reason)

    def announce(self, health: Health, reason: str, message: str) -> None:
        """At most one Event per (uid, reason) per episode."""
        key = (health.node.uid, reason)
        if key not in self.announced:
            self.announced.add(key)
            self.events.append(EventAction(health.node.uid, health.node.name, reason, message))


def _no_address_message(node: NodeView, settings: PipelineSettings) -> str:
    listed = ", ".join(f"{a.type}={a.address}" for a in node.addresses) or "none"
    return f"no probeable address in families {', '.join(settings.families)} (addresses: {listed})"

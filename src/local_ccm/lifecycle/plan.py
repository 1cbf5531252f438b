"""The deletion pipeline's decisions (spec/lifecycle.md §5.1, §5.3, §5.4, §5.6, §6).

Pure, no I/O, no clock: `now` is monotonic seconds (intervals, windows) or a wall datetime
(ages against API timestamps), always passed in. `plan_deletions` walks the eligible Nodes
oldest first and returns what to do as data: probes to start, Events to send, deletions to
attempt, and the next `PipelineState`. The loop performs them and reports back through
`record_probe`, `record_self_check` and `record_attempt`.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final, Literal

from local_ccm.lifecycle.health import (
    Assessment,
    Health,
    Scope,
)
from local_ccm.lifecycle.model import (
    ICMP,
    Family,
    IPAddress,
    NodeView,
    ProbeKind,
    ProbeOutcome,
    Verdict,
    combine,
    format_time,
    probe_addresses,
    summarize,
)
from local_ccm.validate import CountOrPercent

# Event reasons (§9.1).
CHECKING_REACHABILITY: Final = "CheckingReachability"
NODE_REACHABLE: Final = "NodeReachable"
PROBE_FAILED: Final = "ProbeFailed"
NO_PROBE_ADDRESS: Final = "NoProbeAddress"
BLOCKED_BY_CIRCUIT_BREAKER: Final = "DeletionBlockedByCircuitBreaker"
BLOCKED_BY_SELF_CHECK: Final = "DeletionBlockedBySelfCheck"
RATE_LIMITED: Final = "DeletionRateLimited"
DELETION_ABORTED: Final = "DeletionAborted"
OUT_OF_SERVICE_ADDED: Final = "OutOfServiceTaintAdded"
OUT_OF_SERVICE_REMOVED: Final = "OutOfServiceTaintRemoved"
DELETING_NODE: Final = "DeletingNode"
DELETING_NODE_FAILED: Final = "DeletingNodeFailed"
DRY_RUN_EVENT: Final = "NodeDeletionDryRun"
WARNING_REASONS: Final = frozenset(
    {PROBE_FAILED, NO_PROBE_ADDRESS, BLOCKED_BY_CIRCUIT_BREAKER, BLOCKED_BY_SELF_CHECK,
     DELETING_NODE_FAILED}
)  # fmt: skip
DRY_RUN_PREFIX: Final = "[DRY-RUN] Would delete node"
DEFAULT_MAX_UNHEALTHY: Final = CountOrPercent(40, percent=True)

SkipReason = Literal["breaker_open", "self_check_failed", "rate_limited", "reachable", "unknown"]
AttemptResult = Literal["deleted", "gone", "failed", "aborted", "precondition_failed", "dry_run"]
SelfCheckResult = Literal["passed", "failed", "skipped"]
Attempt = Literal["running", "dry_run_done"]
Step = Literal[
    "in_progress", "dry_run_done", "breaker_open", "no_address", "probing", "reachable",
    "unknown", "self_check_pending", "self_check_failed", "breaker_hold", "rate_limited",
    "delete",
]  # fmt: skip


# ------------------------------------------------------------------ circuit breaker (§6.2)
@dataclass(frozen=True)
class Breaker:
    open: bool
    unhealthy: int
    threshold: int
    population: int

    def __str__(self) -> str:
        return f"U={self.unhealthy} T={self.threshold} N={self.population}"


def breaker_threshold(limit: CountOrPercent, population: int) -> int:
    """T of §6.2.2: K, or max(1, ⌊P × N / 100⌋), except that 0% gives 0."""
    if not limit.percent:
        return limit.value
    if limit.value == 0:
        return 0
    return max(1, limit.value * population // 100)


def breaker(limit: CountOrPercent, population: int, unhealthy: int) -> Breaker:
    threshold = breaker_threshold(limit, population)
    return Breaker(unhealthy > threshold, unhealthy, threshold, population)


# ------------------------------------------------------------------ probes (§5.4)
@dataclass(frozen=True)
class ProbeRecord:
    """The probes of one Node in one eligibility stretch (monotonic seconds): when the latest
    started, whether it still runs, and the latest completed one's outcomes."""

    started: float
    running: bool = True
    finished: float | None = None
    outcomes: tuple[ProbeOutcome, ...] = ()

    @property
    def verdict(self) -> Verdict | None:
        return None if self.finished is None else combine(self.outcomes)


def is_fresh(record: ProbeRecord | None, now: float, interval: float) -> bool:
    """§5.4.3: a verdict is valid for one interval after it completed."""
    return record is not None and record.finished is not None and now - record.finished < interval


def may_start_probe(record: ProbeRecord | None, now: float, interval: float) -> bool:
    """§5.4.3: at most one probe per interval (start to start), never two at once."""
    return record is None or (not record.running and now - record.started >= interval)


def rate_tokens(starts: Iterable[float], now: float, interval: float, limit: int) -> int:
    """§6.4.1: deletions that may still start in the sliding window (now − interval, now]."""
    return max(0, limit - sum(1 for t in starts if now - t < interval))


# ------------------------------------------------------------------ self-check (§6.3)
@dataclass(frozen=True)
class SelfCheck:
    at: float
    result: SelfCheckResult
    peers: tuple[str, ...] = ()


def self_check_peers(
    nodes: Iterable[NodeView], scope: Scope, sample: int, rng: random.Random, **address_opts: Any
) -> tuple[NodeView, ...]:
    """§6.3.1: up to `sample` random Ready peers, not the own node, not terminating, with a
    probeable address; control-plane Nodes may be peers."""
    peers = sorted(
        (
            n
            for n in nodes
            if n.ready == "True"
            and n.deletion_timestamp is None
            and n.name != scope.own_node
            and probe_addresses(n, **address_opts)
        ),
        key=lambda n: n.name,
    )
    return tuple(rng.sample(peers, min(sample, len(peers))))


def self_check_result(peer_verdicts: Sequence[Verdict]) -> SelfCheckResult:
    """§6.3.2/4: passed if any peer is reachable; no peer at all is skipped."""
    if not peer_verdicts:
        return "skipped"
    return "passed" if "reachable" in peer_verdicts else "failed"


# ------------------------------------------------------------------ pipeline data
@dataclass(frozen=True)
class PipelineSettings:
    interval: float
    max_unhealthy: CountOrPercent = DEFAULT_MAX_UNHEALTHY
    max_deletions: int = 1
    kinds: tuple[ProbeKind, ...] = (ICMP,)  # empty: unprobed mode (§5.6)
    probe_all_addresses: bool = False
    families: tuple[Family, ...] = ("ipv4", "ipv6")
    self_check: bool = True
    self_check_sample: int = 3
    dry_run: bool = False
    out_of_service_taint: bool = False

    @property
    def unprobed(self) -> bool:
        return not self.kinds

    def addresses(self, node: NodeView) -> tuple[IPAddress, ...]:
        return probe_addresses(node, all_addresses=self.probe_all_addresses, families=self.families)


@dataclass(frozen=True)
class PipelineState:
    """What survives between evaluations; every per-uid entry is dropped by `forget`."""

    probes: Mapping[str, ProbeRecord] = field(default_factory=dict)
    starts: tuple[tuple[float, str], ...] = ()  # (monotonic, uid) of started deletions
    attempts: Mapping[str, Attempt] = field(default_factory=dict)
    breaker_open: bool = False
    breaker_closed_at: float | None = None
    self_check: SelfCheck | None = None
    self_check_pending: bool = False
    announced: frozenset[tuple[str, str]] = frozenset()  # (uid, Event reason)
    skipped: frozenset[tuple[str, str]] = frozenset()  # (uid, SkipReason)


@dataclass(frozen=True)
class ProbeRequest:
    uid: str
    name: str
    addresses: tuple[IPAddress, ...]
    kinds: tuple[ProbeKind, ...]


@dataclass(frozen=True)
class EventAction:
    uid: str
    name: str
    reason: str
    message: str

    @property
    def type(self) -> Literal["Normal", "Warning"]:
        return "Warning" if self.reason in WARNING_REASONS else "Normal"


@dataclass(frozen=True)
class DeleteAction:
    """Attempt one deletion: fresh GET, `recheck`, optional out-of-service, DELETE."""

    uid: str
    name: str
    t0: datetime
    age: float
    summary: str
    dry_run: bool
    out_of_service: bool


@dataclass(frozen=True)
class Decision:
    uid: str
    name: str
    step: Step


@dataclass(frozen=True)
class Plan:
    state: PipelineState
    breaker: Breaker
    decisions: tuple[Decision, ...] = ()
    probes: tuple[ProbeRequest, ...] = ()
    self_check_probes: tuple[ProbeRequest, ...] = ()
    events: tuple[EventAction, ...] = ()
    skips: tuple[tuple[str, SkipReason], ...] = ()  # new (uid, reason) pairs: the metric
    deletions: tuple[DeleteAction, ...] = ()


# ------------------------------------------------------------------ the walk (§6.1)
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
    """Steps 2-5 of §6.1 for every eligible Node, oldest `t0` first. `nodes` is the whole
    cache (self-check peers may be outside the scope); `now` is monotonic seconds."""
    walk = _Walk(assessment, nodes, scope, state, settings, now=now, rng=rng)
    for health in assessment.eligible:
        walk.step(health)
    return walk.plan()


class _Walk:
    """Mutable scratch state of one `plan_deletions` call; never escapes it."""

    def __init__(
        self,
        assessment: Assessment,
        nodes: Sequence[NodeView],
        scope: Scope,
        state: PipelineState,
        settings: PipelineSettings,
        *,
        now: float,
        rng: random.Random,
    ) -> None:
        self.nodes, self.scope, self.settings, self.now, self.rng = nodes, scope, settings, now, rng
        self.breaker = breaker(settings.max_unhealthy, assessment.population, assessment.unhealthy)
        closed_at = now if state.breaker_open and not self.breaker.open else state.breaker_closed_at
        eligible = {h.node.uid for h in assessment.eligible}
        # A verdict counts only if its probe started after the Node became eligible (§5.4.3):
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
        elif self.breaker.open:  # checked before probing (§6.2.5)
            self.skip(health, "breaker_open", BLOCKED_BY_CIRCUIT_BREAKER, str(self.breaker))
            self.decide(health, "breaker_open")
        elif self.verdict(health) and self.self_check_passed(health):
            self.gate(health)

    def gate(self, health: Health) -> None:
        closed_at = self.state.breaker_closed_at
        if closed_at is not None and self.now - closed_at < self.settings.interval:
            self.decide(health, "breaker_hold")  # §6.2.4: one interval after it closed
            return
        tokens = rate_tokens((s[0] for s in self.state.starts), self.now, self.settings.interval,
                             self.settings.max_deletions) - len(self.deletions)  # fmt: skip
        if tokens <= 0:
            message = f"at most {self.settings.max_deletions} deletion(s) per interval"
            self.skip(health, "rate_limited", RATE_LIMITED, message)
            self.decide(health, "rate_limited")
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
        """True when the verdict is a fresh `unreachable` (§6.1 step 3)."""
        if self.settings.unprobed:
            return True  # §5.6: taken as unreachable without sending anything
        node = health.node
        addresses = self.settings.addresses(node)
        if not addresses:
            self.skip(health, "unknown", NO_PROBE_ADDRESS, _no_address_message(node, self.settings))
            self.decide(health, "no_address")
            return False
        record = self.probes.get(node.uid)
        if may_start_probe(record, self.now, self.settings.interval):
            self.start_probe(health, addresses, record)
        fresh = record is not None and is_fresh(record, self.now, self.settings.interval)
        verdict = record.verdict if record is not None and fresh else None
        if verdict is None:
            self.decide(health, "probing")
        elif verdict == "reachable":
            replied = [o for o in record.outcomes if o.outcome == "reply"] if record else []
            self.skip(health, "reachable", NODE_REACHABLE, summarize(replied[:1]))
            self.decide(health, "reachable")
        elif verdict == "unknown":
            self.skip(health, "unknown", PROBE_FAILED, summarize(record.outcomes if record else ()))
            self.decide(health, "unknown")
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
            f"NotReady since {format_time(health.t0 or datetime.min)} ({health.age:.0f}s); "
            f"probing {', '.join(map(str, addresses))} with {', '.join(map(str, kinds))}"
        )
        self.announce(health, CHECKING_REACHABILITY, message)

    def self_check_passed(self, health: Health) -> bool:
        """§6.3: a fresh passed or skipped self-check; otherwise request one or block."""
        if not self.settings.self_check or self.settings.unprobed:
            return True
        check = self.state.self_check
        if check is not None and self.now - check.at < self.settings.interval:
            if check.result != "failed":
                return True
            message = f"no reachable peer among {', '.join(check.peers)}"
            self.skip(health, "self_check_failed", BLOCKED_BY_SELF_CHECK, message)
            self.decide(health, "self_check_failed")
            return False
        requested = self.state.self_check_pending or self.peer_requests
        if not requested and not self.request_self_check():
            return True
        self.decide(health, "self_check_pending")
        return False

    def request_self_check(self) -> bool:
        """Choose peers and ask for their probes; False when there is no peer (skipped)."""
        peers = self_check_peers(
            self.nodes, self.scope, self.settings.self_check_sample, self.rng,
            all_addresses=self.settings.probe_all_addresses, families=self.settings.families,
        )  # fmt: skip
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

    def skip(self, health: Health, reason: SkipReason, event: str, message: str) -> None:
        if (health.node.uid, reason) not in self.skipped:
            self.skipped.add((health.node.uid, reason))
            self.skips.append((health.node.uid, reason))
        self.announce(health, event, message)

    def announce(self, health: Health, reason: str, message: str) -> None:
        """At most one Event per (uid, reason) per episode (§9.1)."""
        key = (health.node.uid, reason)
        if key not in self.announced:
            self.announced.add(key)
            self.events.append(EventAction(health.node.uid, health.node.name, reason, message))


def _no_address_message(node: NodeView, settings: PipelineSettings) -> str:
    listed = ", ".join(f"{a.type}={a.address}" for a in node.addresses) or "none"
    return f"no probeable address in families {', '.join(settings.families)} (addresses: {listed})"


# ------------------------------------------------------------------ results from the loop
def record_probe(
    state: PipelineState, uid: str, outcomes: Sequence[ProbeOutcome], now: float
) -> PipelineState:
    """A Node probe finished. Ignored when the uid stopped being eligible meanwhile."""
    record = state.probes.get(uid)
    if record is None or not record.running:
        return state
    done = replace(record, running=False, finished=now, outcomes=tuple(outcomes))
    return replace(state, probes={**state.probes, uid: done})


def record_self_check(
    state: PipelineState, peers: Sequence[str], verdicts: Sequence[Verdict], now: float
) -> PipelineState:
    result = self_check_result(verdicts) if peers else "skipped"
    return replace(state, self_check=SelfCheck(now, result, tuple(peers)), self_check_pending=False)


def record_attempt(state: PipelineState, uid: str, result: AttemptResult) -> PipelineState:
    """A deletion attempt ended. A dry-run is done for the episode (§6.7.4); a precondition
    failure or an abort before the DELETE gives its rate-limit token back (§6.4.4)."""
    attempts: dict[str, Attempt] = {k: v for k, v in state.attempts.items() if k != uid}
    if result == "dry_run":
        attempts[uid] = "dry_run_done"
    starts = state.starts
    if result in ("aborted", "precondition_failed"):
        starts = tuple(s for s in starts if s[1] != uid)
    return replace(state, attempts=attempts, starts=starts)


def forget(state: PipelineState, uids: Collection[str]) -> PipelineState:
    """§4.6: drop every piece of per-uid state of ended episodes. Started deletions stay in
    the rate-limit window: they expire with it, or the limit would not limit."""
    gone = set(uids)
    return replace(
        state,
        probes={k: v for k, v in state.probes.items() if k not in gone},
        attempts={k: v for k, v in state.attempts.items() if k not in gone},
        announced=frozenset(a for a in state.announced if a[0] not in gone),
        skipped=frozenset(s for s in state.skipped if s[0] not in gone),
    )


def dry_run_message(action: DeleteAction) -> str:
    """§6.7.3: the [compat] prefix, then uid, t0, age and the probe summary."""
    return (
        f"{DRY_RUN_PREFIX} {action.name} uid={action.uid} t0={format_time(action.t0)} "
        f"age={action.age:.0f}s probes={action.summary}"
    )

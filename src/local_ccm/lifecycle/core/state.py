"""What the deletion pipeline holds, not what it decides (that is `lifecycle.core.deletions`): its
settings, the state that survives between evaluations (probe records, the self-check, started
deletions), the `Plan` an evaluation returns, and how the loop's results update the state.

Pure, no I/O, no clock: `now` is monotonic seconds, always passed in.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import field, replace
from datetime import datetime
from typing import Final, Literal

from local_ccm.lifecycle.core.events import event_type
from local_ccm.lifecycle.core.health import Scope
from local_ccm.lifecycle.core.model import (
    ICMP,
    Family,
    IPAddress,
    NodeView,
    ProbeKind,
    ProbeOutcome,
    Verdict,
    combine,
    probe_addresses,
)
from local_ccm.records import dataclass
from local_ccm.runtime.events import EventType, rfc3339
from local_ccm.validate import CountOrPercent

DRY_RUN_PREFIX: Final = "[DRY-RUN] Would delete node"
DEFAULT_MAX_UNHEALTHY: Final = CountOrPercent(40, percent=True)

SkipReason = Literal["breaker_open", "self_check_failed", "rate_limited", "reachable", "unknown"]
AttemptResult = Literal["deleted", "gone", "failed", "aborted", "precondition_failed", "dry_run"]
FenceResult = Literal["requested", "gone", "aborted", "precondition_failed"]
SelfCheckResult = Literal["passed", "failed", "skipped"]
Attempt = Literal["running", "dry_run_done", "fencing"]
# Where a deletion's "the Node is gone" comes from: the probes, the BMC (its System absent), or
# neither (unprobed mode).
VerdictSource = Literal["probe", "bmc", "unprobed"]
Step = Literal[
    "in_progress", "dry_run_done", "breaker_open", "no_address", "probing", "reachable",
    "unknown", "self_check_pending", "self_check_failed", "breaker_hold", "rate_limited",
    "delete", "bmc_wait", "fence", "fencing", "fence_failed", "fence_dry_run",
]  # fmt: skip


# ------------------------------------------------------------------ circuit breaker
@dataclass(frozen=True)
class Breaker:
    """The population's counts (U, T, N); `why` says what else opened it: the whole cluster's
    counts over the same limit, or every Node NotReady."""

    open: bool
    unhealthy: int
    threshold: int
    population: int
    why: str = ""

    def __str__(self) -> str:
        counts = f"U={self.unhealthy} T={self.threshold} N={self.population}"
        return f"{counts}; {self.why}" if self.why else counts


# ------------------------------------------------------------------ probes
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


# ------------------------------------------------------------------ self-check
@dataclass(frozen=True)
class SelfCheck:
    at: float
    result: SelfCheckResult
    peers: tuple[str, ...] = ()


def self_check_result(peer_verdicts: Sequence[Verdict]) -> SelfCheckResult:
    """Passed if any peer is reachable; no peer at all is skipped (a lone controller cannot
    tell its own partition from dead workers, and the circuit breaker remains)."""
    if not peer_verdicts:
        return "skipped"
    return "passed" if "reachable" in peer_verdicts else "failed"


# ------------------------------------------------------------------ pipeline data
@dataclass(frozen=True)
class PipelineSettings:
    interval: float
    max_unhealthy: CountOrPercent = DEFAULT_MAX_UNHEALTHY
    max_deletions: int = 1
    kinds: tuple[ProbeKind, ...] = (ICMP,)  # empty: unprobed mode
    probe_all_addresses: bool = False
    families: tuple[Family, ...] = ("ipv4", "ipv6")
    self_check: bool = True
    self_check_sample: int = 3
    dry_run: bool = False
    out_of_service_taint: bool = False
    bmc_power_state: bool = False  # read NodeBMCs (docs/bmc.md)
    bmc_max_age: float = 120.0  # a NodeBMC's lastContact older than this is not a reading
    bmc_fencing: bool = False  # power off (through node-bmc) an unreachable Node still On

    @property
    def unprobed(self) -> bool:
        return not self.kinds

    def addresses(self, node: NodeView) -> tuple[IPAddress, ...]:
        return probe_addresses(node, all_addresses=self.probe_all_addresses, families=self.families)


@dataclass(frozen=True)
class LoopConfig:
    """What the loop needs from the command line; durations in seconds."""

    scope: Scope
    settings: PipelineSettings
    timeout: float  # --not-ready-timeout
    selector: str | None = None  # server-side labelSelector of the watch (--node-selector)
    event_namespace: str = "default"
    out_of_service_timeout: float = 300.0

    @property
    def interval(self) -> float:
        return self.settings.interval


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
    # Ready Nodes whose BMC reports the System absent, warned about while that lasts.
    absent_ready: frozenset[str] = frozenset()


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
    def type(self) -> EventType:
        return event_type(self.reason)


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
    source: VerdictSource = "probe"
    bmc: bool = False  # the Node has a NodeBMC: the attempt re-reads it


@dataclass(frozen=True)
class FenceAction:
    """Request a power-off of the Node through its NodeBMC: fresh GETs of both, the same
    re-check as a deletion's and the BMC still On, then the annotation (`core.bmc`)."""

    uid: str
    name: str
    t0: datetime
    age: float
    summary: str  # the probes
    bmc: str  # the NodeBMC's reading


@dataclass(frozen=True)
class Decision:
    """The step the walk stopped at for one Node (logged at DEBUG)."""

    uid: str
    name: str
    step: Step


@dataclass(frozen=True)
class Plan:
    """What one evaluation does: the new state and the actions, all applied by the loop."""

    state: PipelineState
    breaker: Breaker
    decisions: tuple[Decision, ...] = ()
    probes: tuple[ProbeRequest, ...] = ()
    self_check_probes: tuple[ProbeRequest, ...] = ()
    events: tuple[EventAction, ...] = ()
    skips: tuple[tuple[str, SkipReason], ...] = ()  # new (uid, reason) pairs: the metric
    deletions: tuple[DeleteAction, ...] = ()
    fences: tuple[FenceAction, ...] = ()


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
    """A deletion attempt ended. A dry-run is done for the episode; a precondition
    failure or an abort before the DELETE gives its rate-limit token back."""
    attempts: dict[str, Attempt] = {k: v for k, v in state.attempts.items() if k != uid}
    if result == "dry_run":
        attempts[uid] = "dry_run_done"
    starts = state.starts
    if result in ("aborted", "precondition_failed"):
        starts = tuple(s for s in starts if s[1] != uid)
    return replace(state, attempts=attempts, starts=starts)


def record_fence(state: PipelineState, uid: str, result: FenceResult) -> PipelineState:
    """A power-off request ended: written (its token is spent, like a sent DELETE's), or not
    (the token goes back; the next evaluation decides again on what it sees then)."""
    attempts = {k: v for k, v in state.attempts.items() if k != uid}
    starts = state.starts if result == "requested" else tuple(
        s for s in state.starts if s[1] != uid)  # fmt: skip
    return replace(state, attempts=attempts, starts=starts)


def forget(state: PipelineState, uids: Collection[str]) -> PipelineState:
    """Drop every piece of per-uid state of ended episodes. Started deletions stay in
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
    """The [compat] prefix, then uid, t0, age and the probe summary."""
    return (
        f"{DRY_RUN_PREFIX} {action.name} uid={action.uid} t0={rfc3339(action.t0)} "
        f"age={action.age:.0f}s probes={action.summary}"
    )

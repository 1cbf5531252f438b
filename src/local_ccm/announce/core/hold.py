"""Who answers for an address: the per-address Lease decision and self-fencing. Pure, no I/O.

Every announced address has a `coordination.k8s.io/v1` Lease whose holder is a Node name. The
API server's compare-and-swap (create, or update at a resourceVersion) lets one agent at a time
win it; `decide` says what an agent does with the Lease as it last read it, `answering` whether
it may answer ARP and NDP for the address at a given moment. The fields, their wire format and
the judgement of another holder's expiry are leader election's (`local_ccm.lease.election`):
expiry is measured on the local monotonic clock from the moment the record was first seen to
change, never by comparing the remote `renewTime` with the local wall clock, so clock offsets
between Nodes cannot make two holders.

The safety argument. An agent answers only until ``renewed_at + renew_deadline``, where
``renewed_at`` is when it *sent* its last successful write. Another agent takes the address
over only with a write based on the record it last read, which it first saw no earlier than
that write reached the API server, and only once ``lease_duration + skew_margin`` has passed
since then on its own clock. ``renew_deadline < lease_duration + skew_margin``, so the holder
has stopped before any other can start, whatever the network did to either of them; the
margin (3 s with the defaults) absorbs clock rate differences and the time an adapter takes to
act on a fence. A write that lands late finds a newer resourceVersion and fails.
"""

from __future__ import annotations

import ipaddress
import math
from datetime import datetime
from typing import Final

from local_ccm.lease.election import (
    ElectionConfig,
    LeaseRecord,
    ObservedState,
    acquired_record,
    election_problems,
    observe,
    release_record,
)
from local_ccm.records import dataclass

LEASE_PREFIX: Final = "l2-"


@dataclass(frozen=True)
class Timings:
    """Every timing of L2 announcement, in seconds; all agents must use the same ones.

    - `lease_duration`: written as ``leaseDurationSeconds``; others wait this long after the
      record last changed before they may take the address over.
    - `renew_period`: a holder renews this often (1 800 writes per address-hour at 2 s).
    - `renew_deadline`: a holder answers until this long after it sent its last successful
      renewal, then stops until a renewal succeeds again.
    - `rank_step`: the k-th candidate waits k steps longer, so the first one alone writes.
    - `skew_margin`: added to every takeover wait, for clock rates and acting on a fence.
    - `announce_at`: when the gratuitous ARP and unsolicited advertisements go out after
      answering starts: three rounds, as RFC 4861 7.2.6 allows (MAX_NEIGHBOR_ADVERTISEMENT,
      at least a second apart); a lost first round costs a second, not a cache lifetime.
    """

    lease_duration: float = 6.0
    renew_period: float = 2.0
    renew_deadline: float = 4.0
    rank_step: float = 0.5
    skew_margin: float = 1.0
    announce_at: tuple[float, ...] = (0.0, 1.0, 2.0)

    def __post_init__(self) -> None:
        problems = timing_problems(self)
        if problems:
            raise ValueError("; ".join(problems))

    def election(self, node: str) -> ElectionConfig:
        """Leader election's configuration for this Node's agent, for its record builders."""
        return ElectionConfig(self.lease_duration, self.renew_deadline, self.renew_period, node)


def timing_problems(t: Timings) -> list[str]:
    """Every problem with `t`: leader election's rules, and non-negative waits."""
    problems = election_problems(t.lease_duration, t.renew_deadline, t.renew_period)
    problems += [
        f"{name} must be >= 0"
        for name, value in (("rank step", t.rank_step), ("skew margin", t.skew_margin))
        if not value >= 0
    ]
    if list(t.announce_at) != sorted(t.announce_at) or any(not a >= 0 for a in t.announce_at):
        problems.append("announcement times must be >= 0 and in order")
    return problems


@dataclass(frozen=True)
class HoldState:
    """What one agent remembers about one address's Lease between decisions."""

    # The last record seen and the local monotonic time it was first seen; a record of None
    # with a time: the Lease was missing when first looked at.
    observed: ObservedState = ObservedState()
    renewed_at: float | None = None  # when its last successful write was sent; None: not held
    answer_until: float | None = None  # renewed_at + renew deadline: the self-fence


@dataclass(frozen=True)
class Acquire:
    """Take the address over: create the Lease (`create`) or update it at its resourceVersion."""

    record: LeaseRecord
    create: bool


@dataclass(frozen=True)
class Renew:
    """Update our Lease at the resourceVersion of our last write."""

    record: LeaseRecord


@dataclass(frozen=True)
class Release:
    """Stop answering (already done in the returned state), then write `record`: no holder."""

    record: LeaseRecord


@dataclass(frozen=True)
class WaitUntil:
    """Nothing to write; decide again at `at` (local monotonic), or when an input changes."""

    at: float | None


Step = Acquire | Renew | Release | WaitUntil
Write = Acquire | Renew | Release


@dataclass(frozen=True)
class Decision:
    """One step, the state to keep and a reason for the logs."""

    step: Step
    state: HoldState  # to keep, and to fence with, from now on: before the write is sent
    reason: str


def lease_name(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """The Lease of an address: ``l2-`` and the address, IPv6 written out in full with dashes
    for colons (``l2-fd00-0000-…-0001``) so that the name is a valid object name."""
    if isinstance(address, ipaddress.IPv6Address):
        return LEASE_PREFIX + address.exploded.replace(":", "-")
    return LEASE_PREFIX + str(address)


def answering(state: HoldState, now: float) -> bool:
    """Whether this agent may answer for the address at local monotonic time `now`."""
    return state.answer_until is not None and now < state.answer_until


def decide(
    state: HoldState,
    lease: LeaseRecord | None,
    *,
    me: str,
    rank: int | None,
    now: float,
    wall: datetime,
    timings: Timings,
) -> Decision:
    """What to do about one address's Lease, as just read (None: there is none).

    `rank`: this Node's place among the eligible candidates (`choice.place`), None when not
    eligible; `now` the local monotonic time, `wall` the wall-clock time written as renewTime.
    A holder keeps the address while it stays eligible, whoever ranks higher (moving costs a
    failover gap for nothing), and releases it once it is not; a candidate never takes a Lease
    another Node holds before it expired, and never sooner than its rank allows.
    """
    observed = _see(state.observed, lease, now)
    if lease is not None and lease.holder_identity == me:
        return _as_holder(state, observed, lease, me=me, rank=rank, now=now, wall=wall, t=timings)
    if state.renewed_at is not None:
        holder = lease.holder_identity if lease is not None else ""
        lost = f"lost the Lease to {holder or 'nobody (deleted or released)'}; "
        decision = _as_candidate(observed, lease, me=me, rank=rank, now=now, wall=wall, t=timings)
        return Decision(decision.step, decision.state, lost + decision.reason)
    return _as_candidate(observed, lease, me=me, rank=rank, now=now, wall=wall, t=timings)


def written(state: HoldState, write: Write, sent_at: float, timings: Timings) -> HoldState:
    """The state after `write` succeeded; `sent_at` is the monotonic time taken *before* the
    request left. A failed write changes nothing: the next read decides again, and the fence
    keeps its time. After an Acquire or Renew the agent answers (and, if it was not answering
    just before, sends the takeover announcements); after a Release it does not."""
    observed = ObservedState(write.record, sent_at)
    if isinstance(write, Release):
        return HoldState(observed)
    return HoldState(observed, sent_at, sent_at + timings.renew_deadline)


def takeover_at(observed: ObservedState, rank: int, timings: Timings) -> float:
    """When a candidate of this `rank` may write, on the local monotonic clock: a held Lease
    after its duration (ours if the record's is shorter) and the skew margin from when its
    record was first seen; a released or missing one at once; then k rank steps."""
    assert observed.observed_at is not None  # set by _see
    at = observed.observed_at + rank * timings.rank_step
    record = observed.record
    if record is not None and record.holder_identity:
        duration = max(record.lease_duration_seconds, math.ceil(timings.lease_duration))
        at += duration + timings.skew_margin
    return at


def _see(observed: ObservedState, lease: LeaseRecord | None, now: float) -> ObservedState:
    """`observe`, and a missing Lease: first seen missing starts the clock now; missing after a
    record keeps that record and its time, so a deletion never hastens a takeover."""
    if lease is not None:
        return observe(observed, lease, now)
    return observed if observed.observed_at is not None else ObservedState(None, now)


def _as_holder(
    state: HoldState,
    observed: ObservedState,
    lease: LeaseRecord,
    *,
    me: str,
    rank: int | None,
    now: float,
    wall: datetime,
    t: Timings,
) -> Decision:
    config = t.election(me)
    if rank is None:
        record = release_record(config, lease, wall)
        assert record is not None  # the Lease names this Node
        return Decision(Release(record), HoldState(observed), "no longer eligible")
    if state.renewed_at is None:
        # The Lease names this Node but this agent never wrote it (it restarted): renew before
        # answering, so the fence starts from a write of its own.
        step = Renew(acquired_record(config, lease, wall))
        return Decision(step, HoldState(observed), "held under this Node's name; renewing")
    due = state.renewed_at + t.renew_period
    kept = HoldState(observed, state.renewed_at, state.answer_until)
    if now < due:
        return Decision(WaitUntil(due), kept, "held")
    return Decision(Renew(acquired_record(config, lease, wall)), kept, "renewal due")


def _as_candidate(
    observed: ObservedState,
    lease: LeaseRecord | None,
    *,
    me: str,
    rank: int | None,
    now: float,
    wall: datetime,
    t: Timings,
) -> Decision:
    state = HoldState(observed)
    if rank is None:
        return Decision(WaitUntil(None), state, "not eligible")
    at = takeover_at(observed, rank, t)
    holder = lease.holder_identity if lease is not None else ""
    if now < at:
        why = f"held by {holder}" if holder else "free"
        return Decision(WaitUntil(at), state, f"{why}; rank {rank} may take it at {at:.2f}")
    step = Acquire(acquired_record(t.election(me), lease, wall), create=lease is None)
    return Decision(step, state, f"taking over from {holder}" if holder else "taking it")

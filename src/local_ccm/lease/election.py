"""Lease-based leader election decisions: pure, no I/O.

The algorithm is shared by all controllers and is wire-compatible
with client-go's `LeaseLock`: a Go controller and this one see each other's holder.
Expiry of someone else's lease is judged on the *local monotonic clock* since the
record last changed, never by comparing the remote `renewTime` with the local wall
clock, so clock skew between replicas cannot cause two leaders (client-go semantics).

The loop that performs the GET/CREATE/UPDATE lives in `local_ccm.lease.elector`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from local_ccm.records import dataclass

# client-go's leaderelection.JitterFactor: candidates wait retry × (1 + U[0, 1.2)).
JITTER_FACTOR = 1.2


class Rng(Protocol):
    """The part of `random.Random` the election needs (seeded in tests)."""

    def random(self) -> float: ...

    def getrandbits(self, k: int, /) -> int: ...


def election_problems(
    lease_duration: float, renew_deadline: float, retry_period: float
) -> list[str]:
    """Every problem with the three durations (client-go's rules), for flag validation."""
    problems = [
        f"{name} must be > 0"
        for name, value in (
            ("lease duration", lease_duration),
            ("renew deadline", renew_deadline),
            ("retry period", retry_period),
        )
        if not value > 0
    ]
    positive = [value if value > 0 else None
                for value in (lease_duration, renew_deadline, retry_period)]  # fmt: skip
    return problems + order_problems(*positive)


def order_problems(
    lease_duration: float | None, renew_deadline: float | None, retry_period: float | None
) -> list[str]:
    """client-go's ordering of the durations, each pair whose values are both known (None: a
    value already refused for itself, which does not hide the other pair's problem)."""
    problems = []
    if lease_duration is not None and renew_deadline is not None \
            and not lease_duration > renew_deadline:  # fmt: skip
        problems.append("lease duration must be greater than renew deadline")
    if renew_deadline is not None and retry_period is not None \
            and not renew_deadline > JITTER_FACTOR * retry_period:  # fmt: skip
        problems.append(f"renew deadline must be greater than {JITTER_FACTOR} × retry period")
    return problems


@dataclass(frozen=True)
class ElectionConfig:
    """Durations in seconds; `identity` is this process's holder identity."""

    lease_duration: float
    renew_deadline: float
    retry_period: float
    identity: str

    def __post_init__(self) -> None:
        problems = election_problems(self.lease_duration, self.renew_deadline, self.retry_period)
        if not self.identity:
            problems.append("identity must not be empty")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def lease_duration_seconds(self) -> int:
        """`spec.leaseDurationSeconds` is whole seconds; round up so we never promise less."""
        return math.ceil(self.lease_duration)

    @property
    def write_timeout(self) -> float:
        """Client timeout for every write made while leading (write fencing: a deposed
        leader's write cannot land after a successor could have acquired the lease).

        At most lease duration − renew deadline (5 s with the defaults), and below the
        renew deadline so the fencing window `fence_after` stays positive.
        """
        return min(self.lease_duration - self.renew_deadline, self.renew_deadline / 2)

    @property
    def fence_after(self) -> float:
        """No write starts once the last successful renewal is older than this.

        fence_after + write_timeout = renew deadline < lease duration, so a write
        started in the window lands before any successor can have acquired the lease.
        """
        return self.renew_deadline - self.write_timeout


@dataclass(frozen=True)
class LeaseRecord:
    """The client-go leader-election fields of a Lease `spec`."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    lease_transitions: int = 0


@dataclass(frozen=True)
class ObservedState:
    """The last record seen and the local monotonic time it was first seen."""

    record: LeaseRecord | None = None
    observed_at: float | None = None


class Action(enum.Enum):
    CREATE = "create"
    UPDATE = "update"
    WAIT = "wait"
    LOST = "lost"  # we held the lease at the last observation and no longer do


@dataclass(frozen=True)
class Decision:
    """What to do after one GET; `record` is the spec to write for CREATE/UPDATE."""

    action: Action
    observed: ObservedState
    record: LeaseRecord | None = None
    reason: str = ""


# ------------------------------------------------------------------ wire format


def format_micro_time(value: datetime) -> str:
    """MicroTime: RFC 3339 in UTC with exactly six fractional digits."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(value: object) -> datetime | None:
    """Parse a MicroTime/Time string; None when absent or not a timestamp."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def record_from_lease(lease: Mapping[str, Any]) -> LeaseRecord:
    """The election fields of a Lease object; missing fields read as empty/zero."""
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    return LeaseRecord(
        holder_identity=holder if isinstance(holder, str) else "",
        lease_duration_seconds=_int(spec.get("leaseDurationSeconds")),
        acquire_time=parse_micro_time(spec.get("acquireTime")),
        renew_time=parse_micro_time(spec.get("renewTime")),
        lease_transitions=_int(spec.get("leaseTransitions")),
    )


def _spec_fields(record: LeaseRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "holderIdentity": record.holder_identity,
        "leaseDurationSeconds": record.lease_duration_seconds,
        "leaseTransitions": record.lease_transitions,
    }
    if record.acquire_time is not None:
        fields["acquireTime"] = format_micro_time(record.acquire_time)
    if record.renew_time is not None:
        fields["renewTime"] = format_micro_time(record.renew_time)
    return fields


def lease_for_create(name: str, namespace: str, record: LeaseRecord) -> dict[str, Any]:
    """A new Lease object holding `record`."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": _spec_fields(record),
    }


def lease_for_update(current: Mapping[str, Any], record: LeaseRecord) -> dict[str, Any]:
    """`current` with the election fields replaced.

    Everything else (metadata.resourceVersion for the precondition, `strategy`,
    `preferredHolder`, labels, ...) is preserved, as client-go does. A new top level and a new
    `spec`; the rest is shared with `current`, which neither side changes (a deep copy of the
    Lease was most of the CPU of a renewal).
    """
    return {**current, "spec": {**(current.get("spec") or {}), **_spec_fields(record)}}


# ------------------------------------------------------------------ decisions


def new_identity(hostname: str, rng: Rng) -> str:
    """`<hostname>_<16 hex>`: unique per process even for two hostNetwork pods on one Node."""
    return f"{hostname}_{rng.getrandbits(64):016x}"


def choose_identity(given: str, pod_name: str, hostname: str, rng: Rng) -> str:
    """`--leader-elect-identity` verbatim; else the lower-cased POD_NAME or hostname plus a
    random suffix (`new_identity`)."""
    if given:
        return given
    return new_identity((pod_name or hostname).lower(), rng)


def candidate_delay(config: ElectionConfig, rng: Rng) -> float:
    """A candidate's wait before its next attempt: retry period plus up to 1.2× jitter."""
    return config.retry_period * (1.0 + JITTER_FACTOR * rng.random())


def observe(observed: ObservedState, lease: LeaseRecord, now_mono: float) -> ObservedState:
    """Remember `lease` and the local time, but only when holder or renewTime changed."""
    previous = observed.record
    if (
        previous is not None
        and previous.holder_identity == lease.holder_identity
        and previous.renew_time == lease.renew_time
    ):
        return observed
    return ObservedState(record=lease, observed_at=now_mono)


def held_elsewhere(
    identity: str, observed: ObservedState, lease: LeaseRecord | None, now_mono: float
) -> tuple[ObservedState, str]:
    """The observation after reading `lease` (None = NotFound) and, while a holder other than
    `identity` is within its term, why: "held by …"; "" once the Lease is free (absent,
    released, or unchanged for its `leaseDurationSeconds` on the local clock)."""
    if lease is None:
        return ObservedState(), ""
    seen = observe(observed, lease, now_mono)
    if not lease.holder_identity or lease.holder_identity == identity:
        return seen, ""
    assert seen.observed_at is not None  # set by observe()
    age = now_mono - seen.observed_at
    if age >= lease.lease_duration_seconds:
        return seen, ""
    return seen, (f"held by {lease.holder_identity}, unchanged for {age:.1f}s "
                  f"of {lease.lease_duration_seconds}s")  # fmt: skip


def acquired_record(
    config: ElectionConfig, old: LeaseRecord | None, now_wall: datetime
) -> LeaseRecord:
    """The record to write when taking or renewing the lease."""
    if old is None:
        return LeaseRecord(config.identity, config.lease_duration_seconds, now_wall, now_wall, 0)
    if old.holder_identity == config.identity:
        acquire = old.acquire_time or now_wall
        transitions = old.lease_transitions
    else:
        acquire, transitions = now_wall, old.lease_transitions + 1
    return LeaseRecord(
        config.identity, config.lease_duration_seconds, acquire, now_wall, transitions
    )


def decide(
    config: ElectionConfig,
    observed: ObservedState,
    lease: LeaseRecord | None,
    now_mono: float,
    now_wall: datetime,
) -> Decision:
    """One attempt (every retry period), given the GET's result (None = NotFound).

    A leader that finds another holder, or no Lease at all, has lost: someone else may
    have led in between, so it must not simply take the lease again.
    """
    leading = observed.record is not None and observed.record.holder_identity == config.identity
    if lease is None:
        if leading:
            return Decision(Action.LOST, ObservedState(), reason="the lease was deleted")
        return Decision(Action.CREATE, ObservedState(), acquired_record(config, None, now_wall))
    seen, held = held_elsewhere(config.identity, observed, lease, now_mono)
    if leading and lease.holder_identity != config.identity:
        holder = lease.holder_identity or "nobody"
        return Decision(Action.LOST, seen, reason=f"the lease is now held by {holder}")
    if held:
        return Decision(Action.WAIT, seen, reason=held)
    return Decision(Action.UPDATE, seen, acquired_record(config, lease, now_wall))


def release_record(
    config: ElectionConfig, current: LeaseRecord, now_wall: datetime
) -> LeaseRecord | None:
    """The graceful-release record, or None if we do not hold the lease.

    Empty holder and `leaseDurationSeconds = 1` let a candidate take over at its next
    attempt instead of after a full lease duration; transitions are unchanged.
    """
    if current.holder_identity != config.identity:
        return None
    return LeaseRecord("", 1, now_wall, now_wall, current.lease_transitions)


def renewal_overdue(config: ElectionConfig, last_renewed: float, now_mono: float) -> bool:
    """True once no renewal succeeded for the renew deadline: the leader must stop."""
    return now_mono - last_renewed >= config.renew_deadline


def may_write(config: ElectionConfig, last_renewed: float | None, now_mono: float) -> bool:
    """Write fencing: may a write start now?"""
    return last_renewed is not None and now_mono - last_renewed < config.fence_after

"""The clean-up of address Leases nobody announces any more. Pure, no I/O.

A Lease ``l2-<address>`` stays after its holder released it; without a clean-up every address
ever announced leaves one object behind. `sweep` says when an agent deletes one: the address is
not a target any more (no pool with ``l2Announcement`` holds it for a Service, in this agent's
view), this agent neither holds nor answers for it, and the record it decides on is

- released (empty holder): its last holder stopped answering before it sent the release, or
- held by another Node but unchanged for its duration (ours if longer) + the skew margin since
  this agent first saw it, on its own monotonic clock: the holder fenced itself by then, the
  same rule as a takeover (`hold.takeover_at`).

The delete carries the uid and resourceVersion of that record as preconditions, so a write
since (a renewal, a takeover, a release) makes it fail: a delete never acts on a stale read.
After it nobody answers for the address, so an agent that creates the Lease afresh (an address
announced again) is as safe as one that takes a released Lease over.

Who deletes: the Ready Nodes in rendezvous order (`choice.rank`); the k-th waits k ×
`CLEANUP_STEP` longer, so normally the first alone deletes and the others see the Lease gone
before their turn. A 409 or 404 is a normal outcome: someone else wrote or deleted first.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Set
from typing import Final

from local_ccm.announce.core import choice, hold
from local_ccm.lease.election import LeaseRecord
from local_ccm.records import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# Between the clean-up's candidates: nothing is in a hurry, and a step longer than a watch
# event's trip keeps it to one DELETE per Lease.
CLEANUP_STEP: Final = 2.0


@dataclass(frozen=True)
class Delete:
    """Delete the Lease at the uid and resourceVersion of the record decided on."""

    reason: str


@dataclass(frozen=True)
class Keep:
    """Nothing to delete; decide again at `at` (local monotonic), or when an input changes."""

    at: float | None
    reason: str


Sweep = Delete | Keep


def place(address: IPAddress, ready: Set[str], me: str) -> int | None:
    """This Node's place among the clean-up's candidates for `address` (the Ready Nodes in
    rendezvous order); None when this Node is not Ready in its own view."""
    if me not in ready:
        return None
    return choice.rank(address, ready).index(me)


def sweep(
    state: hold.HoldState,
    lease: LeaseRecord | None,
    *,
    targeted: bool,
    me: str,
    place: int | None,
    now: float,
    timings: hold.Timings,
) -> Sweep:
    """Whether to delete one address's Lease, as just read (None: there is none).

    `state` is the address's state after `hold.decide` on the same record (its `observed` says
    since when this agent has seen it), `targeted` whether the address is a target in this
    agent's view, `place` this Node's place among the clean-up's candidates (`place`).
    """
    why_not = _kept(state, lease, targeted=targeted, me=me, place=place, now=now)
    if why_not or lease is None or place is None:
        return Keep(None, why_not)
    at = hold.takeover_at(state.observed, 0, timings) + place * CLEANUP_STEP
    what = f"held by {lease.holder_identity}" if lease.holder_identity else "released"
    if now < at:
        return Keep(at, f"not announced, {what}; place {place} may delete it at {at:.2f}")
    return Delete(f"not announced, {what}")


def _kept(
    state: hold.HoldState,
    lease: LeaseRecord | None,
    *,
    targeted: bool,
    me: str,
    place: int | None,
    now: float,
) -> str:
    """Why the Lease is kept whatever the time, or "" when it may be deleted in time."""
    if lease is None:
        return "no Lease"
    if targeted:
        return "announced"
    if lease.holder_identity == me or state.renewed_at is not None or hold.answering(state, now):
        return "held by this Node: released first"
    if place is None:
        return "this Node is not Ready"
    seen = state.observed.record
    if (seen is None or state.observed.observed_at is None
            or (seen.holder_identity, seen.renew_time) != (lease.holder_identity,
                                                           lease.renew_time)):  # fmt: skip
        return "not the record observed"  # hold.decide's state comes first
    return ""

"""The clean-up's decision (`cleanup.sweep`): a Lease is deleted only for an address no longer
announced, never while this Node holds it, and a held one only once its holder has fenced
itself (the takeover wait)."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime

import pytest

from local_ccm.announce.core import choice
from local_ccm.announce.core.cleanup import CLEANUP_STEP, Delete, Keep, place, sweep
from local_ccm.announce.core.hold import HoldState, Timings, decide
from local_ccm.lease.election import LeaseRecord

pytestmark = pytest.mark.unit
VIP = ipaddress.ip_address("192.0.2.10")
T = Timings()
WALL = datetime(2030, 1, 1, tzinfo=UTC)
RELEASED = LeaseRecord("", 1, WALL, WALL, 3)
HELD = LeaseRecord("node-b", 6, WALL, WALL, 3)


def seen(record: LeaseRecord, at: float = 100.0, me: str = "node-a") -> HoldState:
    """The state `hold.decide` leaves for a non-eligible, non-holding agent first seeing
    `record` at `at`."""
    return decide(HoldState(), record, me=me, rank=None, now=at, wall=WALL, timings=T).state


def test_a_released_lease_of_an_address_no_longer_announced_is_deleted_at_once() -> None:
    state = seen(RELEASED)
    assert isinstance(sweep(state, RELEASED, targeted=False, me="node-a", place=0, now=100.0,
                            timings=T), Delete)  # fmt: skip


def test_a_lease_of_a_still_announced_address_is_never_deleted() -> None:
    for record in (RELEASED, HELD):
        state = seen(record)
        for now in (100.0, 1e6):
            assert sweep(state, record, targeted=True, me="node-a", place=0, now=now,
                         timings=T) == Keep(None, "announced")  # fmt: skip


def test_a_held_fresh_lease_waits_for_its_holders_fence() -> None:
    state = seen(HELD)
    wait = 6 + T.skew_margin  # its duration + the skew margin: the takeover's wait
    for now in (100.0, 100.0 + T.renew_deadline, 100.0 + wait - 0.01):
        result = sweep(state, HELD, targeted=False, me="node-a", place=0, now=now, timings=T)
        assert result == Keep(100.0 + wait, result.reason)
    assert isinstance(sweep(state, HELD, targeted=False, me="node-a", place=0,
                            now=100.0 + wait, timings=T), Delete)  # fmt: skip


def test_a_renewed_record_starts_the_wait_again() -> None:
    state = seen(HELD)
    renewed = LeaseRecord("node-b", 6, WALL, datetime(2030, 1, 1, 0, 0, 2, tzinfo=UTC), 3)
    later = decide(state, renewed, me="node-a", rank=None, now=106.0, wall=WALL,
                   timings=T).state  # fmt: skip
    result = sweep(later, renewed, targeted=False, me="node-a", place=0, now=107.5, timings=T)
    assert result == Keep(106.0 + 7, result.reason)


def test_a_lease_this_node_holds_or_answers_for_is_not_deleted() -> None:
    mine = LeaseRecord("node-a", 6, WALL, WALL, 3)
    state = seen(mine)
    assert isinstance(sweep(state, mine, targeted=False, me="node-a", place=0, now=1e6,
                            timings=T), Keep)  # fmt: skip
    answering = HoldState(seen(RELEASED).observed, renewed_at=99.0, answer_until=103.0)
    assert isinstance(sweep(answering, RELEASED, targeted=False, me="node-a", place=0,
                            now=1e6, timings=T), Keep)  # fmt: skip


def test_only_the_first_ready_node_deletes_at_once_the_others_later() -> None:
    ready = frozenset({"node-a", "node-b", "node-c"})
    order = choice.rank(VIP, ready)
    assert [place(VIP, ready, node) for node in order] == [0, 1, 2]
    assert place(VIP, ready, "node-d") is None  # not Ready
    state = seen(RELEASED)
    second = sweep(state, RELEASED, targeted=False, me="node-a", place=1, now=100.0, timings=T)
    assert second == Keep(100.0 + CLEANUP_STEP, second.reason)
    assert sweep(state, RELEASED, targeted=False, me="node-a", place=None, now=1e6,
                 timings=T) == Keep(None, "this Node is not Ready")  # fmt: skip


def test_no_lease_nothing_to_delete() -> None:
    assert sweep(HoldState(), None, targeted=False, me="node-a", place=0, now=0.0,
                 timings=T) == Keep(None, "no Lease")  # fmt: skip

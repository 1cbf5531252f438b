"""The per-address Lease decision and self-fencing, one call at a time."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta

import pytest

from local_ccm.announce.core import hold
from local_ccm.announce.core.hold import (
    Acquire,
    Decision,
    HoldState,
    Release,
    Renew,
    Timings,
    WaitUntil,
)
from local_ccm.lease.election import LeaseRecord

T = Timings()
WALL = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def other(renewed: datetime = WALL, holder: str = "b", duration: int = 6) -> LeaseRecord:
    return LeaseRecord(holder, duration, WALL, renewed, 3)


def decide(state: HoldState, lease: LeaseRecord | None, now: float, rank: int | None = 0,
           me: str = "a") -> Decision:  # fmt: skip
    return hold.decide(state, lease, me=me, rank=rank, now=now,
                       wall=WALL + timedelta(seconds=now), timings=T)  # fmt: skip


def held_at(sent: float) -> HoldState:
    """This agent ("a") holding the Lease after a write sent at `sent`."""
    first = decide(HoldState(), None, sent)
    assert isinstance(first.step, Acquire)
    return hold.written(first.state, first.step, sent, T)


def test_the_defaults_are_the_documented_timings() -> None:
    assert (T.lease_duration, T.renew_period, T.renew_deadline) == (6.0, 2.0, 4.0)
    assert (T.rank_step, T.skew_margin, T.announce_at) == (0.5, 1.0, (0.0, 1.0, 2.0))
    assert T.election("a").lease_duration_seconds == 6


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"renew_deadline": 6.0}, "lease duration must be greater than renew deadline"),
        ({"renew_period": 4.0}, "renew deadline must be greater than 1.2 × retry period"),
        ({"rank_step": -1.0}, "rank step must be >= 0"),
        ({"skew_margin": float("nan")}, "skew margin must be >= 0"),
        ({"announce_at": (1.0, 0.0)}, "announcement times must be >= 0 and in order"),
    ],
)
def test_bad_timings_are_refused(changes: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Timings(**changes)  # type: ignore[arg-type]


def test_lease_names_are_valid_object_names() -> None:
    assert hold.lease_name(ipaddress.IPv4Address("192.0.2.10")) == "l2-192.0.2.10"
    assert hold.lease_name(ipaddress.IPv6Address("fd00::1")) == (
        "l2-fd00-0000-0000-0000-0000-0000-0000-0001"
    )


# ------------------------------------------------------------------ candidates


def test_a_missing_lease_is_created_by_the_first_candidate_at_once() -> None:
    decision = decide(HoldState(), None, 100.0)
    assert isinstance(decision.step, Acquire)
    assert decision.step.create
    assert decision.step.record == LeaseRecord("a", 6, WALL + timedelta(seconds=100),
                                               WALL + timedelta(seconds=100), 0)  # fmt: skip
    assert not hold.answering(decision.state, 100.0)  # not before the write succeeded


def test_a_later_candidate_waits_its_rank_steps() -> None:
    first = decide(HoldState(), None, 100.0, rank=2)
    assert first.step == WaitUntil(101.0)
    assert decide(first.state, None, 100.99, rank=2).step == WaitUntil(101.0)
    assert isinstance(decide(first.state, None, 101.0, rank=2).step, Acquire)


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_takeover_only_after_expiry_skew_margin_and_rank_delay(rank: int) -> None:
    seen = decide(HoldState(), other(), 100.0, rank=rank)
    at = 100.0 + 6 + 1 + 0.5 * rank
    assert seen.step == WaitUntil(at)
    assert decide(seen.state, other(), at - 0.001, rank=rank).step == WaitUntil(at)
    taken = decide(seen.state, other(), at, rank=rank)
    assert isinstance(taken.step, Acquire)
    assert not taken.step.create
    assert taken.step.record.holder_identity == "a"
    assert taken.step.record.lease_transitions == 4


def test_a_renewal_seen_restarts_the_wait() -> None:
    seen = decide(HoldState(), other(), 100.0)
    renewed = decide(seen.state, other(renewed=WALL + timedelta(seconds=2)), 102.0)
    assert renewed.step == WaitUntil(109.0)
    assert decide(renewed.state, other(renewed=WALL + timedelta(seconds=2)), 107.5).step == (
        WaitUntil(109.0)
    )


def test_the_longer_of_the_records_duration_and_ours_counts() -> None:
    assert decide(HoldState(), other(duration=15), 0.0).step == WaitUntil(16.0)
    assert decide(HoldState(), other(duration=1), 0.0).step == WaitUntil(7.0)


def test_a_released_lease_is_taken_without_waiting_for_expiry() -> None:
    released = LeaseRecord("", 1, WALL, WALL, 3)
    assert isinstance(decide(HoldState(), released, 50.0).step, Acquire)
    assert decide(HoldState(), released, 50.0, rank=1).step == WaitUntil(50.5)


def test_a_candidate_that_is_not_eligible_waits_for_a_change() -> None:
    decision = decide(HoldState(), None, 5.0, rank=None)
    assert decision.step == WaitUntil(None)
    assert decision.reason == "not eligible"


# ------------------------------------------------------------------ holders


def test_a_holder_answers_until_its_renew_deadline_from_the_write_it_sent() -> None:
    state = held_at(10.0)
    assert hold.answering(state, 10.0)
    assert hold.answering(state, 13.999)
    assert not hold.answering(state, 14.0)


def test_a_holder_renews_every_period_and_keeps_answering() -> None:
    state = held_at(10.0)
    record = state.observed.record
    assert decide(state, record, 11.0).step == WaitUntil(12.0)
    due = decide(state, record, 12.0)
    assert isinstance(due.step, Renew)
    assert hold.answering(due.state, 12.0)  # renewing changes nothing until it succeeds
    renewed = hold.written(due.state, due.step, 12.1, T)
    assert renewed.answer_until == pytest.approx(16.1)


def test_a_holder_keeps_the_address_whatever_its_rank() -> None:
    state = held_at(10.0)
    assert decide(state, state.observed.record, 11.0, rank=7).step == WaitUntil(12.0)


def test_a_holder_that_is_no_longer_eligible_stops_answering_then_releases() -> None:
    state = held_at(10.0)
    decision = decide(state, state.observed.record, 11.0, rank=None)
    assert isinstance(decision.step, Release)
    assert decision.step.record.holder_identity == ""
    assert decision.step.record.lease_duration_seconds == 1
    assert not hold.answering(decision.state, 11.0)  # before the write is even sent
    assert not hold.answering(hold.written(decision.state, decision.step, 11.0, T), 11.0)


def test_a_holder_whose_renewals_fail_stops_at_the_deadline_but_keeps_trying() -> None:
    state = held_at(10.0)
    for now in (12.0, 13.0, 14.0, 20.0):
        decision = decide(state, state.observed.record, now)
        step = decision.step
        assert isinstance(step, Renew)
        state = decision.state  # the write failed: nothing else changes
    assert not hold.answering(state, 14.0)
    assert isinstance(step, Renew)
    assert hold.answering(hold.written(state, step, 20.0, T), 20.0)


def test_a_holder_that_sees_another_holder_has_lost_at_once() -> None:
    state = held_at(10.0)
    decision = decide(state, other(), 11.0)
    assert not hold.answering(decision.state, 11.0)
    assert decision.step == WaitUntil(18.0)
    assert decision.reason.startswith("lost the Lease to b")


def test_a_deleted_lease_does_not_hasten_a_takeover() -> None:
    held = held_at(10.0)
    lost = decide(held, None, 11.0)
    assert not hold.answering(lost.state, 11.0)
    assert lost.step == WaitUntil(17.0)  # from our own last record, as the others judge it
    waiting = decide(HoldState(), other(), 20.0)
    assert decide(waiting.state, None, 21.0).step == WaitUntil(27.0)


def test_a_restarted_agent_renews_its_nodes_lease_before_answering() -> None:
    ours = LeaseRecord("a", 6, WALL, WALL, 2)
    decision = decide(HoldState(), ours, 3.0)
    assert isinstance(decision.step, Renew)
    assert decision.step.record.lease_transitions == 2
    assert not hold.answering(decision.state, 3.0)
    assert hold.answering(hold.written(decision.state, decision.step, 3.0, T), 3.0)


def test_a_partitioned_holder_stops_before_another_could_take_over() -> None:
    """Two clocks that disagree on the time and on its rate: the holder's last write is sent at
    real time 0 and seen by the other at real time `seen`; when the holder stops answering,
    in real time, is before the earliest moment the other may write."""
    for offset_a, offset_b in ((0.0, 5000.0), (123.4, -77.0)):
        for rate_a, rate_b in ((1.001, 0.999), (0.999, 1.001)):
            for seen in (0.0, 0.3, 2.5):
                state = held_at(offset_a)  # sent at real 0 on the holder's clock
                assert state.answer_until is not None
                stops = (state.answer_until - offset_a) / rate_a
                now_b = offset_b + rate_b * seen
                candidate = decide(HoldState(), state.observed.record, now_b, me="b")
                assert isinstance(candidate.step, WaitUntil)
                assert candidate.step.at is not None
                may_write = (candidate.step.at - offset_b) / rate_b
                assert may_write - stops > 2.9

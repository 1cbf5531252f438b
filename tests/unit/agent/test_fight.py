"""The address-fight state machine, driven with explicit times (no clock)."""

from __future__ import annotations

from local_ccm.agent.core.fight import (
    FIRST_PAUSE,
    MAX_PAUSE,
    FightState,
    fight_may_write,
    fight_observe,
    fight_record_write,
    fight_tick,
    last_address_writer,
)
from tests.unit.agent.builders import addrs, node

OURS = addrs("Int 192.0.2.10, Ext 198.51.100.10, Hostname n1")
KUBELET = addrs("Int 192.0.2.10, Hostname n1")


def _revert(state: FightState, rv: int, now: float) -> tuple[FightState, str | None]:
    state = fight_record_write(state, OURS, str(rv), now)
    return fight_observe(state, addresses=KUBELET, rv=str(rv + 1), would_write=True, now=now + 1)


def test_three_reverts_within_ten_minutes_enter_the_conflict_state_a21() -> None:
    state = FightState()
    events = []
    for i in range(3):
        state, event = _revert(state, 10 * i + 10, 100.0 * i)
        events.append(event)
    assert events == ["revert", "revert", "conflict_entered"]
    assert state.conflict
    assert not fight_may_write(state, 201.0 + FIRST_PAUSE - 1)
    assert fight_may_write(state, 201.0 + FIRST_PAUSE)


def test_reverts_spread_over_more_than_ten_minutes_do_not_conflict() -> None:
    state = FightState()
    for i in range(5):
        state, event = _revert(state, 10 * i + 10, 400.0 * i)
        assert event == "revert"
    assert not state.conflict


def test_retry_reverted_again_doubles_the_pause_up_to_the_cap() -> None:
    state = FightState()
    for i in range(3):
        state, _ = _revert(state, 10 * i + 10, float(i))
    pauses = []
    for i in range(8):
        state, _ = _revert(state, 100 + 10 * i, state.retry_at)
        pauses.append(state.pause)
    assert pauses[:5] == [
        2 * FIRST_PAUSE,
        4 * FIRST_PAUSE,
        8 * FIRST_PAUSE,
        16 * FIRST_PAUSE,
        MAX_PAUSE,
    ]
    assert pauses[-1] == MAX_PAUSE


def test_a_write_surviving_ten_minutes_resolves_the_conflict() -> None:
    state = FightState()
    for i in range(3):
        state, _ = _revert(state, 10 * i + 10, float(i))
    state = fight_record_write(state, OURS, "99", state.retry_at)
    assert fight_tick(state, state.retry_at + 599)[1] is None
    state, event = fight_tick(state, state.retry_at + 600)
    assert event == "conflict_resolved"
    assert not state.conflict
    assert fight_may_write(state, 0.0)


def test_our_own_echo_and_older_events_are_not_reverts() -> None:
    state = fight_record_write(FightState(), OURS, "10", 0.0)
    assert fight_observe(state, addresses=OURS, rv="10", would_write=False, now=1.0)[1] is None
    assert fight_observe(state, addresses=KUBELET, rv="9", would_write=True, now=1.0)[1] is None


def test_a_foreign_addition_in_canonical_position_is_not_a_revert() -> None:
    state = fight_record_write(FightState(), OURS, "10", 0.0)
    grown = (*OURS[:2], *addrs("Ext 203.0.113.99"), OURS[2])
    assert fight_observe(state, addresses=grown, rv="11", would_write=False, now=1.0)[1] is None


def test_one_revert_per_write() -> None:
    state = fight_record_write(FightState(), OURS, "10", 0.0)
    state, first = fight_observe(state, addresses=KUBELET, rv="11", would_write=True, now=1.0)
    # kubelet heartbeats bump the RV; without a new write of ours they are not new reverts
    _, second = fight_observe(state, addresses=KUBELET, rv="12", would_write=True, now=2.0)
    assert (first, second) == ("revert", None)


def test_last_address_writer_comes_from_managed_fields() -> None:
    n = node("Int 192.0.2.10")
    n["metadata"]["managedFields"] = [
        {"manager": "kubelet", "time": "2026-01-01T00:00:01Z",
         "fieldsV1": {"f:status": {"f:addresses": {}, "f:conditions": {}}}},
        {"manager": "local-ccm", "time": "2026-01-01T00:00:05Z",
         "fieldsV1": {"f:status": {"f:addresses": {}}}},
        {"manager": "other", "time": "2026-01-01T00:00:09Z",
         "fieldsV1": {"f:metadata": {"f:labels": {}}}},
    ]  # fmt: skip
    assert last_address_writer(n) == "kubelet"
    assert last_address_writer(node()) is None

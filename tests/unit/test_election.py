"""The pure leader-election decisions."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local_ccm.lease.election import (
    Action,
    ElectionConfig,
    LeaseRecord,
    ObservedState,
    candidate_delay,
    decide,
    election_problems,
    format_micro_time,
    lease_for_create,
    lease_for_update,
    may_write,
    new_identity,
    observe,
    parse_micro_time,
    record_from_lease,
    release_record,
    renewal_overdue,
)

ME = "node-a_0000000000000001"
OTHER = "node-b_0000000000000002"
NOW = datetime(2026, 11, 21, 12, 0, 0, 123456, tzinfo=UTC)
CONFIG = ElectionConfig(lease_duration=15, renew_deadline=10, retry_period=2, identity=ME)


class FixedRng:
    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value

    def getrandbits(self, k: int, /) -> int:
        return 0xABC


def held_by(holder: str, *, renew: datetime = NOW, transitions: int = 3) -> LeaseRecord:
    return LeaseRecord(holder, 15, NOW - timedelta(minutes=5), renew, transitions)


# ------------------------------------------------------------------ config


def test_default_durations_are_valid_and_fence_within_the_lease() -> None:
    assert CONFIG.lease_duration_seconds == 15
    assert CONFIG.write_timeout == 5
    assert CONFIG.fence_after == 5
    assert CONFIG.fence_after + CONFIG.write_timeout < CONFIG.lease_duration


def test_test_durations_are_valid() -> None:
    config = ElectionConfig(lease_duration=4, renew_deadline=3, retry_period=0.5, identity=ME)
    assert (config.write_timeout, config.fence_after) == (1, 2)


def test_write_timeout_leaves_a_positive_fencing_window_for_long_leases() -> None:
    config = ElectionConfig(lease_duration=60, renew_deadline=10, retry_period=2, identity=ME)
    assert config.write_timeout == 5
    assert config.fence_after == 5


def test_lease_duration_is_rounded_up_to_whole_seconds() -> None:
    config = ElectionConfig(lease_duration=4.2, renew_deadline=3, retry_period=0.5, identity=ME)
    assert config.lease_duration_seconds == 5


@pytest.mark.parametrize(
    ("durations", "problem"),
    [
        ((10, 10, 2), "lease duration must be greater than renew deadline"),
        ((15, 12, 10), "renew deadline must be greater than 1.2 × retry period"),
        ((15, 2.4, 2), "renew deadline must be greater than 1.2 × retry period"),
        ((0, 10, 2), "lease duration must be > 0"),
        ((15, 10, -1), "retry period must be > 0"),
    ],
)
def test_config_validation_follows_client_go(
    durations: tuple[float, float, float], problem: str
) -> None:
    assert problem in election_problems(*durations)
    with pytest.raises(ValueError, match=re.escape(problem)):
        ElectionConfig(*durations, identity=ME)


def test_config_validation_reports_every_problem_at_once() -> None:
    problems = election_problems(0, 0, 0)
    assert len(problems) == 3, problems
    # a value refused for itself does not hide the other pair's order (client-go's validation
    # lists both)
    assert election_problems(5, 10, 0) == [
        "retry period must be > 0", "lease duration must be greater than renew deadline"
    ]  # fmt: skip


def test_config_needs_an_identity() -> None:
    with pytest.raises(ValueError, match="identity"):
        ElectionConfig(15, 10, 2, identity="")


# ------------------------------------------------------------------ identity and jitter


def test_identity_is_hostname_and_16_hex_digits() -> None:
    assert new_identity("node-a", FixedRng(0)) == "node-a_0000000000000abc"
    rng = random.Random(7)
    first, second = new_identity("node-a", rng), new_identity("node-a", rng)
    assert re.fullmatch(r"node-a_[0-9a-f]{16}", first)
    assert first != second


@given(st.floats(min_value=0, max_value=1, exclude_max=True))
def test_candidate_jitter_is_up_to_1_2_retry_periods(draw: float) -> None:
    delay = candidate_delay(CONFIG, FixedRng(draw))
    assert CONFIG.retry_period <= delay < CONFIG.retry_period * 2.2


# ------------------------------------------------------------------ wire format


def test_micro_time_has_six_fraction_digits_in_utc() -> None:
    assert format_micro_time(NOW) == "2026-11-21T12:00:00.123456Z"
    assert parse_micro_time(format_micro_time(NOW)) == NOW
    assert parse_micro_time("2026-11-21T14:00:00+02:00") == datetime(2026, 11, 21, 12, tzinfo=UTC)
    assert parse_micro_time("not a time") is None
    assert parse_micro_time(None) is None


def test_record_reads_client_go_fields_and_defaults_missing_ones() -> None:
    lease = lease_for_create("l", "ns", held_by(OTHER))
    assert record_from_lease(lease) == held_by(OTHER)
    assert record_from_lease({"spec": {}}) == LeaseRecord()
    assert lease["spec"]["renewTime"] == "2026-11-21T12:00:00.123456Z"
    assert lease["apiVersion"] == "coordination.k8s.io/v1"


def test_update_body_preserves_everything_but_the_election_fields() -> None:
    current = lease_for_create("l", "ns", held_by(OTHER))
    current["metadata"].update(resourceVersion="42", labels={"a": "b"})
    current["spec"].update(strategy="OldestEmulationVersion", preferredHolder="node-c_1")
    updated = lease_for_update(current, LeaseRecord(ME, 15, NOW, NOW, 4))
    assert updated["metadata"] == current["metadata"]
    assert updated["spec"]["strategy"] == "OldestEmulationVersion"
    assert updated["spec"]["preferredHolder"] == "node-c_1"
    assert updated["spec"]["holderIdentity"] == ME
    assert current["spec"]["holderIdentity"] == OTHER, "the input must not change"


# ------------------------------------------------------------------ decide


def test_missing_lease_is_created_with_self_as_holder() -> None:
    decision = decide(CONFIG, ObservedState(), None, 100.0, NOW)
    assert decision.action is Action.CREATE
    assert decision.record == LeaseRecord(ME, 15, NOW, NOW, 0)


def test_fresh_lease_of_another_holder_means_wait() -> None:
    decision = decide(CONFIG, ObservedState(), held_by(OTHER), 100.0, NOW)
    assert decision.action is Action.WAIT
    assert decision.observed == ObservedState(held_by(OTHER), 100.0)


def test_expiry_is_judged_on_the_local_clock_since_the_last_change() -> None:
    seen = decide(CONFIG, ObservedState(), held_by(OTHER), 100.0, NOW).observed
    assert decide(CONFIG, seen, held_by(OTHER), 114.9, NOW).action is Action.WAIT
    taken = decide(CONFIG, seen, held_by(OTHER), 115.0, NOW)
    assert taken.action is Action.UPDATE
    assert taken.record == LeaseRecord(ME, 15, NOW, NOW, 4)


@pytest.mark.parametrize("skew", [timedelta(days=-365), timedelta(days=365)])
def test_remote_renew_time_far_from_local_time_does_not_matter(skew: timedelta) -> None:
    lease = held_by(OTHER, renew=NOW + skew)
    seen = decide(CONFIG, ObservedState(), lease, 100.0, NOW).observed
    assert decide(CONFIG, seen, lease, 114.9, NOW).action is Action.WAIT
    assert decide(CONFIG, seen, lease, 115.0, NOW).action is Action.UPDATE


def test_a_renewal_by_the_holder_restarts_the_local_expiry_clock() -> None:
    seen = decide(CONFIG, ObservedState(), held_by(OTHER), 100.0, NOW).observed
    renewed = held_by(OTHER, renew=NOW + timedelta(seconds=2))
    seen = decide(CONFIG, seen, renewed, 110.0, NOW).observed
    assert seen.observed_at == 110.0
    assert decide(CONFIG, seen, renewed, 124.9, NOW).action is Action.WAIT
    assert decide(CONFIG, seen, renewed, 125.0, NOW).action is Action.UPDATE


def test_an_unchanged_record_keeps_its_first_observation_time() -> None:
    seen = observe(ObservedState(), held_by(OTHER), 100.0)
    assert observe(seen, held_by(OTHER), 105.0) is seen


def test_released_lease_is_taken_at_once_and_counts_a_transition() -> None:
    released = LeaseRecord("", 1, NOW, NOW, 3)
    decision = decide(CONFIG, ObservedState(), released, 100.0, NOW)
    assert decision.action is Action.UPDATE
    assert decision.record == LeaseRecord(ME, 15, NOW, NOW, 4)


def test_renewal_keeps_acquire_time_and_transitions() -> None:
    mine = held_by(ME)
    later = NOW + timedelta(seconds=2)
    decision = decide(CONFIG, ObservedState(mine, 100.0), mine, 102.0, later)
    assert decision.action is Action.UPDATE
    assert decision.record == LeaseRecord(ME, 15, mine.acquire_time, later, 3)


def test_leader_seeing_another_holder_has_lost() -> None:
    decision = decide(CONFIG, ObservedState(held_by(ME), 100.0), held_by(OTHER), 102.0, NOW)
    assert decision.action is Action.LOST
    assert OTHER in decision.reason


def test_leader_finding_no_lease_has_lost() -> None:
    decision = decide(CONFIG, ObservedState(held_by(ME), 100.0), None, 102.0, NOW)
    assert decision.action is Action.LOST


# ------------------------------------------------------------------ release and fencing


def test_release_record_empties_holder_and_keeps_transitions() -> None:
    later = NOW + timedelta(seconds=9)
    assert release_record(CONFIG, held_by(ME), later) == LeaseRecord("", 1, later, later, 3)
    assert release_record(CONFIG, held_by(OTHER), later) is None


def test_renewal_is_overdue_at_the_renew_deadline() -> None:
    assert not renewal_overdue(CONFIG, 100.0, 109.9)
    assert renewal_overdue(CONFIG, 100.0, 110.0)


def test_writes_are_fenced_before_the_renew_deadline() -> None:
    assert may_write(CONFIG, 100.0, 104.9)
    assert not may_write(CONFIG, 100.0, 105.0)
    assert not may_write(CONFIG, None, 100.0)

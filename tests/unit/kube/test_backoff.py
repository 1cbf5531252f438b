"""Backoff maths and the retry policy (local_ccm.kube.backoff)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local_ccm.kube.backoff import Backoff, RetryPolicy
from local_ccm.kube.errors import Conflict, Invalid, Transient


@dataclass
class FixedRng:
    value: float

    def random(self) -> float:
        return self.value


def test_delays_grow_exponentially_to_the_cap() -> None:
    b = Backoff(initial=0.5, factor=2.0, cap=30.0, jitter=0.0)
    assert [b.next_delay(n, rng=FixedRng(0.5)) for n in range(8)] == [
        0.5,
        1.0,
        2.0,
        4.0,
        8.0,
        16.0,
        30.0,
        30.0,
    ]


def test_jitter_bounds() -> None:
    b = Backoff(initial=1.0, factor=2.0, cap=100.0, jitter=0.2)
    assert b.next_delay(0, rng=FixedRng(0.0)) == pytest.approx(0.8)
    assert b.next_delay(0, rng=FixedRng(1.0)) == pytest.approx(1.2)
    assert b.next_delay(2, rng=FixedRng(0.5)) == pytest.approx(4.0)


def test_full_jitter_spans_zero_to_base() -> None:
    b = Backoff(initial=1.0, factor=2.0, cap=300.0, full_jitter=True)
    assert b.next_delay(3, rng=FixedRng(0.0)) == 0.0
    assert b.next_delay(3, rng=FixedRng(0.25)) == pytest.approx(2.0)
    assert b.min_delay == 0.0


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    b = Backoff(initial=0.2, factor=2.0, cap=30.0, jitter=0.2)
    assert b.next_delay(0, retry_after=7.0, rng=FixedRng(0.5)) == 7.0
    assert b.next_delay(0, retry_after=120.0, rng=FixedRng(0.5)) == 30.0
    assert b.next_delay(6, retry_after=1.0, rng=FixedRng(0.5)) == pytest.approx(12.8)


def test_huge_attempt_numbers_do_not_overflow() -> None:
    assert Backoff(cap=30.0, jitter=0.0).next_delay(10_000, rng=FixedRng(0.5)) == 30.0


def test_bad_parameters_are_rejected() -> None:
    with pytest.raises(ValueError, match="backoff"):
        Backoff(initial=5.0, cap=1.0)


@given(
    initial=st.floats(0.01, 5.0),
    factor=st.floats(1.0, 4.0),
    cap_extra=st.floats(0.0, 100.0),
    jitter=st.floats(0.0, 1.0),
    full=st.booleans(),
    attempt=st.integers(0, 200),
    retry_after=st.none() | st.floats(0.0, 500.0),
    u=st.floats(0.0, 1.0),
)
def test_delay_is_within_bounds_and_respects_retry_after(
    *,
    initial: float,
    factor: float,
    cap_extra: float,
    jitter: float,
    full: bool,
    attempt: int,
    retry_after: float | None,
    u: float,
) -> None:
    b = Backoff(initial, factor, initial + cap_extra, jitter, full_jitter=full)
    delay = b.next_delay(attempt, retry_after, FixedRng(u))
    assert b.min_delay - 1e-9 <= delay <= b.cap + 1e-9
    if retry_after is not None:
        assert delay >= min(retry_after, b.cap) - 1e-9


def _refused() -> Transient:
    return Transient(0, "ConnectionError", "refused", request_sent=False)


def _timeout() -> Transient:
    return Transient(0, "Timeout", "timed out", request_sent=True)


@pytest.mark.parametrize(
    ("method", "error", "retried"),
    [
        ("GET", _timeout(), True),
        ("GET", Transient(503, "ServiceUnavailable", ""), True),
        ("GET", Conflict(409, "Conflict", ""), False),
        ("PATCH", Transient(429, "TooManyRequests", ""), True),
        ("PATCH", _refused(), True),
        ("PATCH", _timeout(), False),
        ("POST", Transient(500, "InternalError", ""), False),
        ("DELETE", Invalid(422, "Invalid", ""), False),
    ],
)
def test_retry_policy_table(method: str, error: Transient, retried: bool) -> None:
    assert RetryPolicy(max_attempts=3).should_retry(method, error, attempt=1) is retried


def test_retry_policy_stops_at_max_attempts() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert policy.should_retry("GET", _timeout(), attempt=2)
    assert not policy.should_retry("GET", _timeout(), attempt=3)
    assert not RetryPolicy(max_attempts=1).should_retry("GET", _timeout(), attempt=1)


def test_retry_policy_delay_uses_its_rng_and_retry_after() -> None:
    policy = RetryPolicy(backoff=Backoff(initial=1.0, cap=10.0, jitter=0.0), rng=FixedRng(0.3))
    assert policy.delay(_timeout(), attempt=2) == 2.0
    assert policy.delay(Transient(429, "", "", retry_after=5.0), attempt=1) == 5.0

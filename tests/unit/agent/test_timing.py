"""The loop's pure timing decisions."""

from __future__ import annotations

import pytest

from local_ccm.agent.core.timing import (
    MAX_PROVIDER_ID_FAILURES,
    ProviderIdAttempts,
    debounce_wait,
    is_due,
    provider_id_failed,
    provider_id_succeeded,
    settle_step,
)
from local_ccm.kube.informer import watch_end_reason
from tests.unit.agent.builders import addrs

OLD = addrs("Ext 198.51.100.10")
NEW = addrs("Ext 198.51.100.20")


def test_debounce_waits_for_quiet_after_the_last_trigger() -> None:
    assert debounce_wait(10.0, 10.2, 10.3, quiet=0.25, longest=1.0) == pytest.approx(0.15)


def test_debounce_never_waits_past_the_longest_delay_after_the_first_trigger() -> None:
    assert debounce_wait(10.0, 10.9, 10.95, quiet=0.25, longest=1.0) == pytest.approx(0.05)
    assert debounce_wait(10.0, 10.9, 11.0, quiet=0.25, longest=1.0) <= 0


def test_settle_first_sighting_waits_the_full_settle_time() -> None:
    state, wait = settle_step(None, NEW, 100.0, 5.0)
    assert state is not None
    assert (state.since, wait) == (100.0, 5.0)


def test_settle_agreeing_detection_after_the_settle_time_writes() -> None:
    state, _ = settle_step(None, NEW, 100.0, 5.0)
    assert settle_step(state, NEW, 105.0, 5.0) == (None, 0.0)


def test_settle_a_different_replacement_restarts_the_wait() -> None:
    state, _ = settle_step(None, NEW, 100.0, 5.0)
    restarted, wait = settle_step(state, OLD, 104.0, 5.0)
    assert restarted is not None
    assert (restarted.owned, restarted.since, wait) == (OLD, 104.0, 5.0)


def test_settle_time_zero_writes_at_once() -> None:
    assert settle_step(None, NEW, 100.0, 0.0) == (None, 0.0)


def test_watch_ending_before_the_shortest_requested_timeout_was_closed() -> None:
    assert watch_end_reason(12.0, 300) == "closed"
    assert watch_end_reason(299.9, 300) == "closed"


def test_watch_ending_after_the_shortest_requested_timeout_counts_as_timeout() -> None:
    assert watch_end_reason(300.0, 300) == "timeout"
    assert watch_end_reason(587.0, 300) == "timeout"


def test_a_rate_limited_warning_is_due_first_and_then_every_period() -> None:
    assert is_due(None, 5.0, 600.0)
    assert not is_due(5.0, 604.9, 600.0)
    assert is_due(5.0, 605.0, 600.0)


def test_provider_id_success_is_final() -> None:
    state = provider_id_succeeded(ProviderIdAttempts(), "azure:///subscriptions/s")
    assert (state.value, state.done) == ("azure:///subscriptions/s", True)


def test_provider_id_transport_error_means_not_azure_at_once() -> None:
    state = provider_id_failed(ProviderIdAttempts(), "connection refused", transport=True)
    assert (state.value, state.done, state.absent, state.failures) == (None, True, True, 1)


def test_provider_id_error_answers_are_retried_up_to_three_failures() -> None:
    state = ProviderIdAttempts()
    for attempt in range(1, MAX_PROVIDER_ID_FAILURES + 1):
        assert not state.done
        state = provider_id_failed(state, "HTTP 500", transport=False)
        assert state.failures == attempt
    assert (state.done, state.absent, state.value, state.last_error) == (
        True,
        False,
        None,
        "HTTP 500",
    )

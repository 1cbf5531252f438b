"""The pure parts of the lifecycle bench's apiserver accounting (tests/support/lifecycle_bench)."""

from __future__ import annotations

from tests.support.lifecycle_bench import (
    by_request,
    counter_delta,
    net_rates,
    parse_counters,
    per_hour,
    percentile,
)

BEFORE = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
apiserver_request_total{code="200",component="apiserver",resource="leases",verb="PUT"} 10
apiserver_request_total{code="409",component="apiserver",resource="leases",verb="PUT"} 1
apiserver_request_total{code="200",component="apiserver",resource="nodes",verb="LIST"} 2
apiserver_response_sizes_sum{component="apiserver",resource="leases",verb="PUT"} 5000
apiserver_response_sizes_bucket{component="apiserver",resource="leases",verb="PUT",le="+Inf"} 11
"""
AFTER = BEFORE.replace('verb="PUT"} 10', 'verb="PUT"} 16').replace("} 5000", "} 8000") + (
    'apiserver_request_total{code="200",component="apiserver",resource="",verb="GET"} 3\n'
)


def test_counters_are_summed_over_codes_and_ignore_other_metrics() -> None:
    counters = parse_counters(BEFORE)
    assert counters["apiserver_request_total"][("PUT", "leases", "200")] == 10
    assert counters["apiserver_response_sizes_sum"] == {("PUT", "leases", ""): 5000}
    assert "apiserver_response_sizes_bucket" not in counters


def test_the_delta_keeps_only_what_moved_and_counts_new_keys_from_zero() -> None:
    delta = counter_delta(parse_counters(BEFORE), parse_counters(AFTER))
    assert by_request(delta, "apiserver_request_total") == {"GET -": 3, "PUT leases": 6}
    assert by_request(delta, "apiserver_response_sizes_sum") == {"PUT leases": 3000}


def test_net_rates_subtract_the_background_and_keep_the_controllers_resources() -> None:
    measured = {"PUT leases": 30.0, "GET nodes": 1.0, "GET endpoints": 6.0, "GET -": 9.0}
    background = {"PUT leases": 6.0, "GET endpoints": 6.0, "GET nodes": 2.0}
    assert net_rates(measured, background, 2.0) == {"PUT leases": 18.0}


def test_per_hour_and_percentile() -> None:
    assert per_hour(14, 15.0) == 3360.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 95) == 4.0

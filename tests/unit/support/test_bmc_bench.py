"""The node-bmc bench's readers: the emulator's access log, the controller's histogram, the
audit log's requests by use, and the latency summary against the poll interval."""

from __future__ import annotations

from pathlib import Path

from tests.support import bmc_bench as bb
from tests.support.audit import AuditEvent

LOG = """\
 * Running on https://127.0.0.1:40000
127.0.0.1 - - [02/Dec/2026 12:40:12] "GET /redfish/v1/ HTTP/1.1" 200 -
127.0.0.1 - - [02/Dec/2026 12:40:12] "GET /redfish/v1/Systems/abc HTTP/1.1" 200 -
127.0.0.1 - - [02/Dec/2026 12:40:13] "GET /redfish/v1/Systems/abc HTTP/1.1" 401 -
127.0.0.1 - - [02/Dec/2026 12:40:13] "POST /redfish/v1/Systems/abc/Actions/x HTTP/1.1" 204 -
"""
METRICS = """\
# TYPE local_ccm_bmc_redfish_request_duration_seconds histogram
local_ccm_bmc_redfish_request_duration_seconds_bucket{method="GET",le="0.01"} %d
local_ccm_bmc_redfish_request_duration_seconds_bucket{method="GET",le="0.1"} %d
local_ccm_bmc_redfish_request_duration_seconds_bucket{method="GET",le="+Inf"} %d
local_ccm_bmc_redfish_request_duration_seconds_count{method="GET"} %d
local_ccm_bmc_redfish_request_duration_seconds_sum{method="GET"} 1.0
local_ccm_bmc_redfish_request_duration_seconds_bucket{method="POST",le="0.01"} 0
local_ccm_bmc_redfish_request_duration_seconds_bucket{method="POST",le="0.1"} 1
local_ccm_bmc_redfish_request_duration_seconds_bucket{method="POST",le="+Inf"} 1
local_ccm_bmc_redfish_request_duration_seconds_count{method="POST"} 1
local_ccm_bmc_redfish_request_duration_seconds_sum{method="POST"} 0.05
"""


def test_the_access_log_counts_requests_by_method_and_status() -> None:
    assert bb.access_requests(LOG) == {"GET 200": 2, "GET 401": 1, "POST 204": 1}


def test_the_log_is_read_from_an_offset_in_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "sushy.log"
    path.write_text(LOG + '127.0.0.1 - - [02/Dec/2026 12:40:14] "GET /half')
    first = LOG.index("127.0.0.1")
    text, offset = bb.read_log_from(path, first)
    assert bb.access_requests(text) == {"GET 200": 2, "GET 401": 1, "POST 204": 1}
    assert offset == len(LOG.encode())  # the half line is read next time


def test_the_histogram_is_counted_over_the_window_across_methods() -> None:
    before = bb.Scrape.parse(METRICS % (0, 0, 0, 0))
    after = bb.Scrape.parse(METRICS % (60, 99, 100, 100))
    assert after.total(bb.REDFISH_COUNT) - before.total(bb.REDFISH_COUNT) == 100  # POST: 1, 1
    assert after.total(bb.REDFISH_COUNT, method="GET") == 100
    buckets = bb.bucket_delta(before, after, bb.REDFISH_BUCKET)
    assert buckets == [(0.01, 60.0), (0.1, 99.0), (float("inf"), 100.0)]
    assert bb.quantile_le(buckets, 0.5) == 0.01
    assert bb.quantile_le(buckets, 0.99) == 0.1
    assert bb.quantile_le([], 0.5) is None


def event(verb: str, resource: str, subresource: str | None = None) -> AuditEvent:
    ref = {"resource": resource, **({"subresource": subresource} if subresource else {})}
    return AuditEvent({"verb": verb, "objectRef": ref})


def test_requests_are_grouped_by_use() -> None:
    found = bb.by_request([event("get", "leases"), event("update", "leases"),
                           event("patch", "nodebmcs", "status"), event("get", "secrets"),
                           event("create", "selfsubjectaccessreviews")])  # fmt: skip
    assert found == {"create selfsubjectaccessreviews": 1, "get leases": 1, "get secrets": 1,
                     "patch nodebmcs/status": 1, "update leases": 1}  # fmt: skip
    groups = {"leader election": ["leases"], "status": ["nodebmcs/status"]}
    assert bb.shares(found, groups) == {"leader election": 2, "status": 1, "other": 2}


def test_rates_are_per_hour_and_per_node_hour() -> None:
    assert bb.per_hour(50, 600) == 300.0
    assert bb.per_node_hour(10_000, 600, 500) == 120.0


def test_latencies_are_summarised_against_the_poll_interval() -> None:
    found = bb.latency_summary([3.0, 1.0, 30.0, 15.0, 16.0], 30.0)
    assert found == {"count": 5, "min_s": 1.0, "median_s": 15.0, "p90_s": 30.0, "max_s": 30.0,
                     "median_per_interval": 0.5, "max_per_interval": 1.0}  # fmt: skip
    assert bb.latency_summary([], 30.0) == {"count": 0}


def test_the_latency_nodes_are_spread_over_all() -> None:
    names = [f"n{i}" for i in range(100)]
    assert bb.spread(names, 4) == ["n0", "n25", "n50", "n75"]
    assert bb.spread(names[:3], 20) == ["n0", "n1", "n2"]

"""The shared metrics registry: declarations, closed-set series, and the metric names, types,
labels and help texts of every component (the agent, node-ipam, node-lifecycle, the CSR
approver, service-lb-ipam and node-bmc), which dashboards rely on (`metric_names.txt`)."""

from __future__ import annotations

from pathlib import Path

from local_ccm.agent.metrics import AgentMetrics
from local_ccm.announce.metrics import AnnounceMetrics
from local_ccm.announce.speaker import Counters
from local_ccm.bmc.metrics import BmcMetrics
from local_ccm.csr.metrics import CsrMetrics
from local_ccm.ipam.metrics import IpamMetrics
from local_ccm.lbipam.metrics import LbMetrics
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.runtime.metrics import LeaderMetrics, Metrics, counter, gauge, histogram
from local_ccm.runtime.procmetrics import ProcessCollector, PythonCollector
from local_ccm.runtime.promtext import Counter, Gauge, Histogram, Registry

NAMES = Path(__file__).with_name("metric_names.txt")


class Small(Metrics):
    prefix = "t_"
    runs = counter("runs", "Runs", "kind", "result", series=[("a", "b"), ("ok", "failed")])
    up = gauge("up", "Up")
    took = histogram("took_seconds", "Duration", buckets=(1, 2))


def test_declared_metrics_are_per_instance_with_their_series_at_zero() -> None:
    one, two = Small(), Small(Registry())
    one.runs.labels("a", "ok").inc()
    one.observe_response("GET", "10.0.0.1:6443", "200", 0.01)
    assert one.registry.get_sample_value("t_runs_total", {"kind": "a", "result": "ok"}) == 1
    assert two.registry.get_sample_value("t_runs_total", {"kind": "b", "result": "failed"}) == 0
    assert two.registry.get_sample_value("t_runs_total", {"kind": "a", "result": "ok"}) == 0
    labels = {"method": "GET", "host": "10.0.0.1:6443", "code": "200"}
    assert one.registry.get_sample_value("rest_client_requests_total", labels) == 1
    assert two.registry.get_sample_value("rest_client_requests_total", labels) is None
    assert one.registry.get_sample_value("t_took_seconds_bucket", {"le": "2.0"}) == 0
    assert one.registry.get_sample_value("process_open_fds") is not None


def describe(registry: Registry) -> list[str]:
    """One line per family of `registry` but the process and Python ones: the declared
    metrics, and the families of its other collectors (the work queue's in-flight gauges,
    the L2 speaker's counters) as a scrape shows them."""
    lines = []
    for collector in registry.collectors():
        if isinstance(collector, Counter | Gauge | Histogram):
            buckets = getattr(collector, "bounds", None)
            more = f" buckets={list(buckets[:-1])}" if buckets else ""
            labels = list(collector.labelnames)
            doc = collector.documentation
            lines.append(f"{collector.name} {collector.kind} {labels} {doc!r}{more}")
        elif not isinstance(collector, ProcessCollector | PythonCollector):
            for family in collector.collect():
                labels = list(family.samples[0].labels) if family.samples else []
                lines.append(f"{family.name} {family.type} {labels} {family.documentation!r}")
    return sorted(lines)


def l2_registry() -> Registry:
    """The agent's L2 families, each with a sample (the speaker's appear once counted)."""
    registry, counters = Registry(), Counters()
    counters.replies[("eth0", "ipv4")] = counters.announcements[("eth0", "ipv4")] = 1
    counters.dropped[("eth0", "rate_limit")] = counters.reopens["eth0"] = 1
    AnnounceMetrics(registry, counters)
    return registry


def test_metric_names_types_labels_and_help_are_unchanged() -> None:
    found = [
        *describe(AgentMetrics().registry),
        *describe(l2_registry()),
        *describe(IpamMetrics().registry),
        *describe(LifecycleMetrics().registry),
        *describe(CsrMetrics().registry),
        *describe(LbMetrics().registry),
        *describe(BmcMetrics().registry),
        *describe(LeaderMetrics("lease").registry),
    ]
    assert found == NAMES.read_text().splitlines()


# Families with labels that have no series until used: open label values (answer codes, hosts,
# pools, managers, addresses), series made when the process starts (watches, probe kinds), and
# the four outcome counters docs/metrics.md names, whose series appear with their first event.
NOT_AT_ZERO = {
    "rest_client_requests", "rest_client_request_duration_seconds", "local_ccm_watch_restarts",
    "local_ccm_agent_detected_address_info", "local_ccm_ipam_cidrs_allocations",
    "local_ccm_ipam_cidrs_releases", "local_ccm_ipam_max_cidrs", "local_ccm_ipam_cidrs_usage_ratio",
    "local_ccm_ipam_free_cidrs", "local_ccm_ipam_unavailable_cidrs", "local_ccm_ipam_node_writes",
    "local_ccm_ipam_node_patch_failures", "local_ccm_ipam_foreign_allocations",
    "local_ccm_ipam_nodes_with_foreign_cidrs", "local_ccm_lifecycle_probe_duration_seconds",
    "local_ccm_lifecycle_probe_capability", "local_ccm_csr_write_failures",
    "local_ccm_lb_pool_addresses", "local_ccm_lb_writes", "local_ccm_lb_write_failures",
    "local_ccm_bmc_redfish_request_duration_seconds",
    # outcome counters (docs/metrics.md)
    "local_ccm_agent_passes", "local_ccm_agent_node_writes", "local_ccm_agent_detections",
    "local_ccm_lb_allocations",
}  # fmt: skip


def test_closed_label_sets_are_exposed_at_zero_from_the_start() -> None:
    """An alert's increase() misses the first event of a series that appears at 1: a new
    labelled family either declares its series or is named above, with the reason."""
    empty = set()
    for metrics in (AgentMetrics(), IpamMetrics(), LifecycleMetrics(), CsrMetrics(), LbMetrics(),
                    BmcMetrics()):  # fmt: skip
        for metric in metrics.registry.metrics():
            if metric.labelnames and not metric.collect()[0].samples:
                empty.add(metric.name)
    assert empty == NOT_AT_ZERO

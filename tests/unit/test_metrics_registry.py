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

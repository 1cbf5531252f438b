"""The /metrics text, parsed back with prometheus_client's own parser: every component's
registry, escaped label values and help texts, histogram buckets up to +Inf, the process
metrics once in a registry of registries."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from local_ccm.agent.metrics import AgentMetrics
from local_ccm.bmc.metrics import BmcMetrics
from local_ccm.csr.metrics import CsrMetrics
from local_ccm.ipam.metrics import IpamMetrics
from local_ccm.lbipam.metrics import LbMetrics
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.runtime.metrics import LeaderMetrics, Metrics, United
from local_ccm.runtime.promtext import (
    CONTENT_TYPE,
    OPENMETRICS_TYPE,
    Collector,
    Counter,
    Gauge,
    Histogram,
    Registry,
    exposition,
    go_float,
    render,
)

PROCESS = {
    "process_virtual_memory_bytes": "gauge",
    "process_resident_memory_bytes": "gauge",
    "process_start_time_seconds": "gauge",
    "process_cpu_seconds": "counter",
    "process_open_fds": "gauge",
    "process_max_fds": "gauge",
    "python_info": "gauge",
    "python_gc_objects_collected": "counter",
    "python_gc_objects_uncollectable": "counter",
    "python_gc_collections": "counter",
}
# prometheus_client's OpenMetrics parser has no annotations: typed here.
parse_openmetrics: Callable[[str], Iterator[Metric]] = (
    openmetrics_parser.text_string_to_metric_families
)
COMPONENTS = (AgentMetrics, IpamMetrics, LifecycleMetrics, CsrMetrics, LbMetrics, BmcMetrics)


def parsed(registry: Collector) -> dict[str, tuple[str, str, list[Sample]]]:
    families = text_string_to_metric_families(exposition(registry))
    return {f.name: (f.type, f.documentation, f.samples) for f in families}


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.__name__)
def test_every_component_registry_parses_back_with_its_declared_metrics(
    component: type[Metrics],
) -> None:
    metrics = component()
    families = parsed(metrics.registry)
    for name, kind in PROCESS.items():
        assert families[name][0] == kind, name
    for metric in metrics.registry.metrics():
        kind, doc, samples = families[metric.name]
        assert (kind, doc) == (metric.kind, metric.documentation)
        for values in metric.series():
            labels = dict(zip(metric.labelnames, values, strict=True))
            assert any(s.labels in (labels, {**labels, "le": "+Inf"}) for s in samples)


def test_label_values_and_help_with_quotes_newlines_and_backslashes_survive() -> None:
    registry = Registry()
    odd = 'a "quoted"\\path\nnext line'
    gauge = Gauge("t_info", 'help with \\ and\nnewline and "quotes"', ["value"], registry)
    gauge.labels(odd).set(1)
    _, doc, samples = parsed(registry)["t_info"]
    assert doc == 'help with \\ and\nnewline and "quotes"'
    assert samples == [Sample("t_info", {"value": odd}, 1.0)]


def test_counter_is_exposed_with_total_and_without_created() -> None:
    registry = Registry()
    counter = Counter("t_runs_total", "Runs", ["result"], registry)
    counter.labels("ok").inc(2)
    text = exposition(registry)
    assert text == (
        '# HELP t_runs_total Runs\n# TYPE t_runs_total counter\nt_runs_total{result="ok"} 2.0\n'
    )
    assert parsed(registry)["t_runs"][2] == [Sample("t_runs_total", {"result": "ok"}, 2.0)]


def test_histogram_buckets_are_cumulative_up_to_inf_with_count_and_sum() -> None:
    registry = Registry()
    took = Histogram("t_took_seconds", "Took", ["kind"], registry, buckets=(1, 2.5))
    for seconds in (0.5, 2, 2.5, 7):
        took.labels("a").observe(seconds)
    samples = parsed(registry)["t_took_seconds"][2]
    assert [(s.name, s.labels.get("le"), s.value) for s in samples] == [
        ("t_took_seconds_bucket", "1.0", 1.0),
        ("t_took_seconds_bucket", "2.5", 3.0),
        ("t_took_seconds_bucket", "+Inf", 4.0),
        ("t_took_seconds_count", None, 4.0),
        ("t_took_seconds_sum", None, 12.0),
    ]


def test_floats_are_spelled_as_prometheus_client_spells_them() -> None:
    spelled = [go_float(v) for v in (1, 0.005, 12345678.0, 1.5e9, float("inf"), -3.0)]
    assert spelled == ["1.0", "0.005", "1.2345678e+07", "1.5e+09", "+Inf", "-3.0"]


def test_a_registry_of_registries_exposes_the_process_metrics_once() -> None:
    united = Registry()
    united.register(IpamMetrics().registry)
    united.register(CsrMetrics().registry)
    text = exposition(united)
    assert text.count("# TYPE process_open_fds gauge") == 1
    assert "local_ccm_ipam_cidr_conflicts" in parsed(united)
    assert "local_ccm_csr_decisions" in parsed(united)


def test_the_managers_metrics_merge_the_families_every_controller_has() -> None:
    ipam, csr, leader = IpamMetrics(), CsrMetrics(), LeaderMetrics("local-ccm")
    for metrics in (ipam, csr):
        metrics.observe_response("PATCH", "10.0.0.1:6443", "200", 0.2)
    ipam.watch_ended("nodes")
    csr.watch_ended("nodes")
    leader.leading(True)
    united = United([ipam.registry, csr.registry, leader.registry])
    text = exposition(united)
    assert text.count("# TYPE process_open_fds gauge") == 1
    assert text.count("# TYPE local_ccm_watch_restarts_total counter") == 1
    assert text.count("local_ccm_build_info{") == 1
    requests = {"code": "200", "method": "PATCH", "host": "10.0.0.1:6443"}
    families = parsed(united)
    assert [s.value for s in families["rest_client_requests"][2] if s.labels == requests] == [2]
    count = [s for s in families["rest_client_request_duration_seconds"][2]
             if s.name.endswith("_count")]  # fmt: skip
    assert [s.value for s in count] == [2]
    restarts = {s.labels["controller"] for s in families["local_ccm_watch_restarts"][2]}
    assert restarts == {"node-ipam", "kubelet-serving-approver"}
    assert [s.value for s in families["leader_election_master_status"][2]] == [1]


def test_render_answers_the_text_format() -> None:
    registry = Registry()
    Gauge("t_up", "Up", registry=registry).set(1)
    assert render(registry) == (CONTENT_TYPE, b"# HELP t_up Up\n# TYPE t_up gauge\nt_up 1.0\n")
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.__name__)
def test_openmetrics_is_answered_to_who_asks_and_parses_back(component: type[Metrics]) -> None:
    metrics = component()
    odd = Gauge("t_odd", 'help "quoted"\\', ["v"], metrics.registry)
    odd.labels('a"b\\c\nd').set(2)
    accept = "application/openmetrics-text; version=1.0.0, text/plain;q=0.5"
    content_type, body = render(metrics.registry, accept)
    assert content_type == OPENMETRICS_TYPE
    families = {f.name: f for f in parse_openmetrics(body.decode())}
    for metric in metrics.registry.metrics():
        assert families[metric.name].type == metric.kind
    assert families["t_odd"].documentation == 'help "quoted"\\'
    assert families["t_odd"].samples[0].labels == {"v": 'a"b\\c\nd'}
    assert render(metrics.registry, "text/plain")[0] == CONTENT_TYPE


def test_series_are_removed_and_cleared_and_labels_are_checked() -> None:
    gauge = Gauge("t_free", "Free", ["pool", "name"])
    gauge.labels("10.0.0.0/8", "a").set(3)
    gauge.labels("10.1.0.0/16", "b").set(4)
    gauge.remove("10.0.0.0/8", "a")
    assert gauge.series() == [("10.1.0.0/16", "b")]
    gauge.clear()
    assert gauge.series() == []
    with pytest.raises(ValueError, match="label values"):
        gauge.labels("only-one")
    with pytest.raises(ValueError, match="labelled"):
        gauge.set(1)
    with pytest.raises(ValueError, match="non-negative"):
        Counter("t_c", "C").inc(-1)


def test_label_values_name_one_series_whatever_their_type() -> None:
    """The series of ("200",) is the series of (200,): values are keyed by their text (a
    lookup by the values as given comes first, and must not split a series)."""
    counter = Counter("t_codes_total", "Codes", ["code"])
    counter.labels(200).inc()
    counter.labels("200").inc()
    assert counter.labels("200") is counter.labels(200)
    assert counter.series() == [("200",)]
    assert counter.labels(200).get() == 2
    with pytest.raises(ValueError, match="label values"):
        counter.labels()
    with pytest.raises(ValueError, match="label values"):
        counter.labels("200", "extra")


def test_a_metric_name_registers_once() -> None:
    registry = Registry()
    Gauge("t_up", "Up", registry=registry)
    with pytest.raises(ValueError, match="duplicated"):
        Counter("t_up_total", "Up", registry=registry)


def test_concurrent_increments_are_all_counted() -> None:
    counter = Counter("t_hits", "Hits", ["who"])

    def hit() -> None:
        for _ in range(2000):
            counter.labels("x").inc()

    threads = [threading.Thread(target=hit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counter.labels("x").get() == 8000


def test_a_controller_held_back_by_another_process_s_lease_is_shown_while_it_waits() -> None:
    leader = LeaderMetrics("local-ccm-controller-manager", {"node-ipam": "node-ipam-controller"})
    wait = {"controller": "node-ipam", "lease": "node-ipam-controller"}

    def waiting() -> list[float]:
        return [s.value for s in parsed(leader.registry)["local_ccm_waiting_for_lease"][2]
                if s.labels == wait]  # fmt: skip

    assert waiting() == [0]  # from the start: an alert's `for` counts from the first 1
    leader.waiting_for("node-ipam", True)
    assert waiting() == [1]
    leader.waiting_for("node-ipam", False)
    assert waiting() == [0]

"""The metrics registry every component builds on: a per-process `Registry` with the process
and Python collectors, and metrics declared as a table of class attributes.

    class LifecycleMetrics(ControllerMetrics):
        prefix = "local_ccm_lifecycle_"
        verdicts = counter("verdicts_total", "Node verdicts", "verdict", series=[VERDICTS])

Each declaration becomes that instance's metric on its registry, named `prefix + name`
(`generic(...)`: the name as given, for the families client-go and controller-runtime users
know); the label values listed in `series` (one set per label, crossed) are exposed from the
start, so dashboards see zeros rather than nothing. docs/metrics.md lists every family.

The generic instruments live here, one place for every controller: the REST client's
(`rest_client_*`), leader election's (`leader_election_master_status`), the work queue's
(`workqueue_*`, see `QueueMetrics`) and the reconciles' (`controller_runtime_reconcile_*`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from local_ccm import __version__
from local_ccm.kube.informer import StreamEnd
from local_ccm.runtime.procmetrics import ProcessCollector, PythonCollector, python_version
from local_ccm.runtime.promtext import Counter, Family, Gauge, Histogram, Registry, Sample

M = TypeVar("M", Counter, Gauge, Histogram)
Series = Sequence[Sequence[str]]

# client-go's (k8s.io/component-base/metrics/prometheus/restclient) request duration buckets
REST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
# client-go's work queue: prometheus.ExponentialBuckets(10e-9, 10, 10)
QUEUE_BUCKETS = tuple(float(f"1e{exp}") for exp in range(-8, 2))
# controller-runtime's reconcile_time_seconds buckets
RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
    0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30,
    40, 50, 60,
)  # fmt: skip
RECONCILE_RESULTS = ("success", "error")
WATCH_REASONS = ("gone", "error", "closed", "timeout")


@dataclass
class Declared(Generic[M]):
    """One metric of a `Metrics` class, created per instance under the attribute's name."""

    kind: type[M]
    name: str
    doc: str
    labels: tuple[str, ...]
    series: Series = ()
    buckets: Sequence[float] | None = None
    attr: str = ""
    bare: bool = False  # the name as given, without the class's prefix

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr

    def __get__(self, obj: Metrics, owner: type) -> M:
        # For the type checker: the instance's own metric (in its __dict__) wins over this.
        metric: M = obj.__dict__[self.attr]
        return metric

    def create(self, prefix: str, registry: Registry) -> M:
        more: dict[str, Any] = {} if self.buckets is None else {"buckets": self.buckets}
        name = self.name if self.bare else prefix + self.name
        metric = self.kind(name, self.doc, self.labels, registry=registry, **more)
        for values in itertools.product(*self.series) if self.series else ():
            metric.labels(*values)
        return metric


def counter(name: str, doc: str, *labels: str, series: Series = ()) -> Declared[Counter]:
    return Declared(Counter, name, doc, labels, series)


def gauge(name: str, doc: str, *labels: str, series: Series = ()) -> Declared[Gauge]:
    return Declared(Gauge, name, doc, labels, series)


def histogram(
    name: str, doc: str, *labels: str, buckets: Sequence[float] | None = None
) -> Declared[Histogram]:
    return Declared(Histogram, name, doc, labels, buckets=buckets)


def generic(declared: Declared[M]) -> Declared[M]:
    """`declared` under its own name: a family other Kubernetes components export too."""
    declared.bare = True
    return declared


class Metrics:
    """Every declared metric of the subclass, registered on `registry` (a fresh one by
    default) in declaration order; the build info and the REST client's series for all."""

    prefix: ClassVar[str] = "local_ccm_"
    build_info = generic(
        gauge("local_ccm_build_info", "Build information", "version", "python_version")
    )
    rest_requests = generic(
        counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            "code", "method", "host",
        )
    )  # fmt: skip
    rest_duration = generic(
        histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            "verb", "host", buckets=REST_BUCKETS,
        )
    )  # fmt: skip

    def __init__(self, registry: Registry | None = None) -> None:
        reg = self.registry = registry or Registry()
        reg.register(ProcessCollector())
        reg.register(PythonCollector())
        declared = {
            attr: value
            for cls in reversed(type(self).__mro__)
            for attr, value in vars(cls).items()
            if isinstance(value, Declared)
        }
        for attr, value in declared.items():
            self.__dict__[attr] = value.create(self.prefix, reg)
        self.build_info.labels(__version__, python_version()).set(1)

    def observe_response(self, method: str, host: str, code: str, seconds: float | None) -> None:
        """One HTTP request to the apiserver (a `Client`'s `on_response`): `code` is the
        status, or "<error>" when no answer came; `seconds` is None for a watch."""
        self.rest_requests.labels(code, method, host).inc()
        if seconds is not None:
            self.rest_duration.labels(method, host).observe(seconds)


class ControllerMetrics(Metrics):
    """What a controller of the manager exports beside its own metrics; `controller` names
    it in the series every controller has (the `controller` label); `queue` is its work
    queue's, named `queue_name` (the `name` label; empty: the controller's name)."""

    controller: ClassVar[str] = ""
    queue_name: ClassVar[str] = ""
    watch_restarts = generic(
        counter(
            "local_ccm_watch_restarts_total", "Watch re-establishments",
            "controller", "resource", "reason",
        )
    )  # fmt: skip

    def watch_ended(self, resource: str) -> Callable[[StreamEnd], None]:
        """An informer's `on_end`: counts the restarts of the watch of `resource`."""
        for reason in WATCH_REASONS:
            self.watch_restarts.labels(self.controller, resource, reason)

        def ended(end: StreamEnd) -> None:
            if end.reason != "stopped":
                self.watch_restarts.labels(self.controller, resource, end.reason).inc()

        return ended

    def __init__(self, registry: Registry | None = None) -> None:
        super().__init__(registry)
        self.queue = QueueMetrics(
            self.registry, self.queue_name or self.controller, self.controller
        )


class LeaderMetrics:
    """client-go's leader election gauge, for the Lease `name` this process campaigns for,
    on a registry of its own (`registry`); and, for each controller that starts only once
    another process's Lease is free (`waits`: controller -> that Lease's name), whether the
    leader is waiting for it now (0 from the start)."""

    def __init__(self, name: str, waits: Mapping[str, str] | None = None) -> None:
        self.registry, self.name = Registry(), name
        self.leader = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease. "
            "Please make sure to group by name.",
            ("name",), registry=self.registry,
        )  # fmt: skip
        self.leader.labels(name).set(0)
        self.waiting = Gauge(
            "local_ccm_waiting_for_lease",
            "1 while this process leads its Lease but holds the controller back because "
            "another process (the standalone binary or the manager) holds the Lease named, "
            "or that Lease cannot be read.",
            ("controller", "lease"), registry=self.registry,
        )  # fmt: skip
        self.waits = dict(waits or {})
        for controller, lease in self.waits.items():
            self.waiting.labels(controller, lease).set(0)

    def leading(self, value: bool) -> None:
        self.leader.labels(self.name).set(1 if value else 0)

    def waiting_for(self, controller: str, value: bool) -> None:
        self.waiting.labels(controller, self.waits[controller]).set(1 if value else 0)


class QueueMetrics:
    """client-go's work queue series (label `name`) and controller-runtime's reconcile
    series (label `controller`) of one controller's queue, on `registry`: what a
    `WorkQueue(metrics=...)` and its worker report. The in-flight gauges (unfinished work,
    longest running processor) are read at scrape time from what `in_flight` returns: the
    seconds each key being worked on has been running."""

    def __init__(self, registry: Registry, name: str, controller: str) -> None:
        self.name, self.controller = name, controller
        self.in_flight: Callable[[], list[float]] = list
        self.depth = Gauge("workqueue_depth", "Current depth of workqueue", ("name",),
                           registry=registry)  # fmt: skip
        self.adds = Counter("workqueue_adds_total", "Total number of adds handled by workqueue",
                            ("name",), registry=registry)  # fmt: skip
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            ("name",), registry=registry, buckets=QUEUE_BUCKETS,
        )  # fmt: skip
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            ("name",), registry=registry, buckets=QUEUE_BUCKETS,
        )  # fmt: skip
        self.retries = Counter("workqueue_retries_total", "Total number of retries handled by "
                               "workqueue", ("name",), registry=registry)  # fmt: skip
        registry.register(self)  # the in-flight gauges
        self.reconciles = Counter(
            "controller_runtime_reconcile_total", "Total number of reconciliations per controller",
            ("controller", "result"), registry=registry,
        )  # fmt: skip
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller", ("controller",),
            registry=registry,
        )  # fmt: skip
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller", ("controller",),
            registry=registry, buckets=RECONCILE_BUCKETS,
        )  # fmt: skip
        for metric in (self.depth, self.adds, self.queue_duration, self.work_duration,
                       self.retries):  # fmt: skip
            metric.labels(name)
        for result in RECONCILE_RESULTS:
            self.reconciles.labels(controller, result)
        self.reconcile_errors.labels(controller)
        self.reconcile_time.labels(controller)

    def collect(self) -> list[Family]:
        running = self.in_flight()
        gauges = (
            ("workqueue_unfinished_work_seconds", sum(running),
             "How many seconds of work has been done that is in progress and hasn't been "
             "observed by work_duration. Large values indicate stuck threads. One can deduce "
             "the number of stuck threads by observing the rate at which this increases."),
            ("workqueue_longest_running_processor_seconds", max(running, default=0.0),
             "How many seconds has the longest running processor for workqueue been running."),
        )  # fmt: skip
        return [
            Family(name, "gauge", doc, [Sample(name, {"name": self.name}, value)])
            for name, value, doc in gauges
        ]

    def reconciled(self, seconds: float, failed: bool) -> None:
        """One key's work ended: its time, and whether it failed (queued again later)."""
        self.work_duration.labels(self.name).observe(seconds)
        self.reconcile_time.labels(self.controller).observe(seconds)
        self.reconciles.labels(self.controller, "error" if failed else "success").inc()
        if failed:
            self.reconcile_errors.labels(self.controller).inc()


class United:
    """One /metrics over several controllers' registries (the manager's): the process and
    Python families once, and every other family merged by name. A series that more than
    one registry has (the same name and labels) is summed when it counts (counters and
    histograms: the REST client's requests of all controllers, as one process-wide counter
    would have them) and taken from the first registry when it is a gauge (the build info)."""

    def __init__(self, registries: Sequence[Registry]) -> None:
        self.registries = list(registries)
        self.process = Registry()
        self.process.register(ProcessCollector())
        self.process.register(PythonCollector())

    def collect(self) -> Iterator[Family]:
        yield from self.process.collect()
        merged: dict[str, Family] = {}
        sums: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}
        for registry in self.registries:
            for collector in registry.collectors():
                if isinstance(collector, ProcessCollector | PythonCollector):
                    continue
                for family in collector.collect():
                    known = merged.setdefault(
                        family.name, Family(family.name, family.type, family.documentation)
                    )
                    for sample in family.samples:
                        key = (family.name, sample.name, tuple(sorted(sample.labels.items())))
                        if key not in sums:
                            sums[key] = sample.value
                            known.samples.append(sample)
                        elif known.type != "gauge":
                            sums[key] += sample.value
        for name, family in merged.items():
            yield Family(name, family.type, family.documentation, [
                Sample(s.name, s.labels, sums[(name, s.name, tuple(sorted(s.labels.items())))])
                for s in family.samples
            ])  # fmt: skip

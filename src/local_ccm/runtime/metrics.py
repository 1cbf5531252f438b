"""The metrics registry every component builds on: a per-process `Registry` with the process
and Python collectors, and metrics declared as a table of class attributes.

    class LifecycleMetrics(Metrics):
        prefix = "node_lifecycle_controller_"
        verdicts = counter("verdicts", "Node verdicts", "verdict", series=[VERDICTS])

Each declaration becomes that instance's metric on its registry, named `prefix + name`; the
label values listed in `series` (one set per label, crossed) are exposed from the start, so
dashboards see zeros rather than nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from local_ccm import __version__
from local_ccm.kube.informer import StreamEnd
from local_ccm.runtime.procmetrics import ProcessCollector, PythonCollector
from local_ccm.runtime.promtext import Counter, Gauge, Histogram, Registry

M = TypeVar("M", Counter, Gauge, Histogram)
Series = Sequence[Sequence[str]]


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

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr

    def __get__(self, obj: Metrics, owner: type) -> M:
        # For the type checker: the instance's own metric (in its __dict__) wins over this.
        metric: M = obj.__dict__[self.attr]
        return metric

    def create(self, prefix: str, registry: Registry) -> M:
        more: dict[str, Any] = {} if self.buckets is None else {"buckets": self.buckets}
        metric = self.kind(prefix + self.name, self.doc, self.labels, registry=registry, **more)
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


class Metrics:
    """Every declared metric of the subclass, registered on `registry` (a fresh one by
    default) in declaration order."""

    prefix: ClassVar[str] = ""
    api_requests = counter("api_requests", "API requests", "verb", "resource", "code")

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

    def observe_request(
        self, verb: str, resource: str, code: str, seconds: float | None = None
    ) -> None:
        """One API request: `api_requests_total{verb,resource,code}`."""
        self.api_requests.labels(verb, resource, code).inc()


class ControllerMetrics(Metrics):
    """What a controller of the manager exports beside its own metrics."""

    watch_restarts = counter("watch_restarts", "Watch re-establishments", "resource", "reason")
    leader = gauge("leader", "1 while leading")
    build_info = gauge("build_info", "Build information", "version")

    def __init__(self, registry: Registry | None = None) -> None:
        super().__init__(registry)
        self.build_info.labels(__version__).set(1)

    def watch_ended(self, resource: str) -> Callable[[StreamEnd], None]:
        """An informer's `on_end`: counts the restarts of the watch of `resource`."""

        def ended(end: StreamEnd) -> None:
            if end.reason != "stopped":
                self.watch_restarts.labels(resource, end.reason).inc()

        return ended

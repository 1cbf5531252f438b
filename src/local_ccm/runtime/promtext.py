"""Counters, gauges and histograms, and their Prometheus text exposition (format 0.0.4).

The few metric kinds this project declares, written for it: the `prometheus_client` library
brought http.server, wsgiref, urllib.request, email and gzip into every process for them
(about 3 MiB of RSS and 40 ms of CPU at start-up). The text is what `prometheus_client`
0.26 renders for the same metrics (names, `_total` on counters, label order and escaping,
float spelling, cumulative `le` buckets), without its `_created` samples, which the 0.0.4
format carries only as extra gauges no dashboard reads (OpenMetrics makes them optional). A
scraper that asks for OpenMetrics (`Accept: application/openmetrics-text`) gets it, as from
`prometheus_client`: counters' families without `_total`, `"` escaped in help, `# EOF` last.

A metric family takes its own lock: the HTTP server thread renders while the event loop
writes.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import field
from typing import ClassVar, Generic, Protocol, TypeVar

from local_ccm.records import dataclass

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text"
OPENMETRICS_TYPE = f"{OPENMETRICS}; version=1.0.0; charset=utf-8"
INF = float("inf")
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


@dataclass(frozen=True)
class Sample:
    """One sample as collected (`labels` a dict, as in prometheus_client's samples)."""

    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Family:
    """One metric family as collected: `name` without the `_total` of a counter."""

    name: str
    type: str
    documentation: str
    samples: list[Sample] = field(default_factory=list)


class Collector(Protocol):
    def collect(self) -> Iterable[Family]: ...


class _Child:
    """One series of a counter or gauge."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._value = 0.0

    def get(self) -> float:
        with self._lock:
            return self._value

    def _add(self, amount: float) -> None:
        with self._lock:
            self._value += amount


class CounterChild(_Child):
    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self._add(amount)


class GaugeChild(_Child):
    def inc(self, amount: float = 1) -> None:
        self._add(amount)

    def dec(self, amount: float = 1) -> None:
        self._add(-amount)

    def set(self, value: float) -> None:
        with self._lock:
            self._value = float(value)


class HistogramChild:
    """One histogram series: per-bucket counts (not yet cumulative) and the sum."""

    def __init__(self, lock: threading.Lock, bounds: Sequence[float]) -> None:
        self._lock = lock
        self._bounds = bounds
        self._counts = [0.0] * len(bounds)
        self._sum = 0.0

    def observe(self, amount: float) -> None:
        index = bisect.bisect_left(self._bounds, amount)  # the first bound >= amount
        with self._lock:
            self._sum += amount
            if index < len(self._bounds) and amount <= self._bounds[index]:  # not NaN
                self._counts[index] += 1

    def snapshot(self) -> tuple[list[float], float]:
        """The cumulative bucket counts (the last is the count) and the sum."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, running = [], 0.0
        for count in counts:
            running += count
            cumulative.append(running)
        return cumulative, total


C = TypeVar("C", CounterChild, GaugeChild, HistogramChild)


class _Metric(Generic[C]):
    """A family of series, one per tuple of label values; without labels, its one series."""

    kind: ClassVar[str]

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        registry: Registry | None = None,
    ) -> None:
        self.name, self.documentation = name, documentation
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        self._children: dict[tuple[str, ...], C] = {}
        if not self.labelnames:
            self._children[()] = self._new_child()
        if registry is not None:
            registry.register(self)

    def _new_child(self) -> C:
        raise NotImplementedError

    def labels(self, *values: object) -> C:
        """The series of these label values, created (at zero) on first use."""
        child = self._children.get(values)  # type: ignore[arg-type]
        if child is not None and values:  # the values are the key's strings: the common case
            return child
        if len(values) != len(self.labelnames) or not self.labelnames:
            raise ValueError(f"{self.name}: expected label values for {self.labelnames}")
        key = tuple(str(value) for value in values)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self._new_child()
            return child

    def remove(self, *values: object) -> None:
        with self._lock:
            self._children.pop(tuple(str(value) for value in values), None)

    def clear(self) -> None:
        with self._lock:
            self._children.clear()

    def series(self) -> list[tuple[str, ...]]:
        """The label values of every series, in creation order."""
        with self._lock:
            return list(self._children)

    def _items(self) -> list[tuple[dict[str, str], C]]:
        with self._lock:
            items = list(self._children.items())
        return [(dict(zip(self.labelnames, key, strict=True)), child) for key, child in items]

    def _only(self) -> C:
        if self.labelnames:
            raise ValueError(f"{self.name}: a labelled metric is used through .labels()")
        return self._children[()]

    def collect(self) -> list[Family]:
        return [Family(self.name, self.kind, self.documentation, list(self._samples()))]

    def _samples(self) -> Iterator[Sample]:
        raise NotImplementedError


class Counter(_Metric[CounterChild]):
    kind = "counter"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        registry: Registry | None = None,
    ) -> None:
        # As prometheus_client: the family is named without `_total`, its samples with it.
        super().__init__(name.removesuffix("_total"), documentation, labelnames, registry)

    def _new_child(self) -> CounterChild:
        return CounterChild(self._lock)

    def inc(self, amount: float = 1) -> None:
        self._only().inc(amount)

    def get(self) -> float:
        return self._only().get()

    def _samples(self) -> Iterator[Sample]:
        for labels, child in self._items():
            yield Sample(self.name + "_total", labels, child.get())


class Gauge(_Metric[GaugeChild]):
    kind = "gauge"

    def _new_child(self) -> GaugeChild:
        return GaugeChild(self._lock)

    def inc(self, amount: float = 1) -> None:
        self._only().inc(amount)

    def dec(self, amount: float = 1) -> None:
        self._only().dec(amount)

    def set(self, value: float) -> None:
        self._only().set(value)

    def get(self) -> float:
        return self._only().get()

    def _samples(self) -> Iterator[Sample]:
        for labels, child in self._items():
            yield Sample(self.name, labels, child.get())


class Histogram(_Metric[HistogramChild]):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        registry: Registry | None = None,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        bounds = [float(bound) for bound in buckets]
        if bounds != sorted(bounds) or "le" in labelnames:
            raise ValueError(f"{name}: buckets must be sorted and `le` is reserved")
        self.bounds = tuple(bounds if bounds and bounds[-1] == INF else [*bounds, INF])
        super().__init__(name, documentation, labelnames, registry)

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self._lock, self.bounds)

    def observe(self, amount: float) -> None:
        self._only().observe(amount)

    def _samples(self) -> Iterator[Sample]:
        for labels, child in self._items():
            cumulative, total = child.snapshot()
            for bound, count in zip(self.bounds, cumulative, strict=True):
                yield Sample(self.name + "_bucket", {**labels, "le": go_float(bound)}, count)
            yield Sample(self.name + "_count", labels, cumulative[-1])
            yield Sample(self.name + "_sum", labels, total)


class Registry:
    """Collectors rendered together, in registration order. A registry may hold registries
    (the manager's one /metrics over its controllers'): a family name already collected is
    skipped, so the process metrics each of them carries appear once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._collectors: list[Collector] = []

    def register(self, collector: Collector) -> None:
        with self._lock:
            if isinstance(collector, _Metric) and collector.name in self._metric_names():
                raise ValueError(f"duplicated metric: {collector.name}")
            self._collectors.append(collector)

    def _metric_names(self) -> set[str]:
        return {c.name for c in self._collectors if isinstance(c, _Metric)}

    def metrics(self) -> list[Counter | Gauge | Histogram]:
        """The metrics registered directly (not the collectors nor the nested registries)."""
        with self._lock:
            return [c for c in self._collectors if isinstance(c, Counter | Gauge | Histogram)]

    def collectors(self) -> list[Collector]:
        """Everything registered, in registration order."""
        with self._lock:
            return list(self._collectors)

    def collect(self) -> Iterator[Family]:
        with self._lock:
            collectors = list(self._collectors)
        seen: set[str] = set()
        for collector in collectors:
            for family in collector.collect():
                if family.name not in seen:
                    seen.add(family.name)
                    yield family

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """The value of sample `name` with exactly these labels, `None` when there is none."""
        wanted = labels or {}
        for family in self.collect():
            for sample in family.samples:
                if sample.name == name and sample.labels == wanted:
                    return sample.value
        return None


def go_float(value: float) -> str:
    """`value` as Go's strconv spells it in the text format (prometheus_client's rule:
    `1.0`, `+Inf`, exponents from 1e+07 on)."""
    if value == INF:
        return "+Inf"
    if value == -INF:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _sample_line(sample: Sample) -> str:
    labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(sample.labels.items()))
    return f"{sample.name}{{{labels}}}" if labels else sample.name


def exposition(registry: Collector, openmetrics: bool = False) -> str:
    """Every family of `registry` in the text format 0.0.4, or in OpenMetrics 1.0."""
    out = []
    for family in registry.collect():
        counter = family.type == "counter" and not openmetrics
        name = family.name + "_total" if counter else family.name
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        doc = doc.replace('"', r"\"") if openmetrics else doc
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {family.type}\n")
        out.extend(f"{_sample_line(s)} {go_float(s.value)}\n" for s in family.samples)
    return "".join(out) + ("# EOF\n" if openmetrics else "")


def render(registry: Collector, accept: str = "") -> tuple[str, bytes]:
    """The content type and body of a /metrics answer to a request's `Accept` header."""
    if any(kind.split(";")[0].strip() == OPENMETRICS for kind in accept.split(",")):
        return OPENMETRICS_TYPE, exposition(registry, openmetrics=True).encode()
    return CONTENT_TYPE, exposition(registry).encode()

"""The node-lifecycle-controller's Prometheus metrics on a
per-process registry. Every label value is a closed set, and every series of those sets is
exposed from the start, so dashboards and tests see zeros rather than nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from local_ccm import __version__

P: Final = "node_lifecycle_controller_"
KINDS: Final = ("icmp", "tcp")
FAMILIES: Final = ("ipv4", "ipv6")
OUTCOMES: Final = ("reply", "no_reply", "no_route", "error")
VERDICTS: Final = ("reachable", "unreachable", "unknown")
RESULTS: Final = ("deleted", "gone", "failed", "aborted", "precondition_failed", "dry_run")
SKIPS: Final = ("breaker_open", "self_check_failed", "rate_limited", "reachable", "unknown")
SELF_CHECK: Final = ("passed", "failed", "skipped")
WATCH_RESTARTS: Final = ("gone", "error", "closed", "timeout")


class LifecycleMetrics:
    """Every controller metric, registered on `registry` (a fresh one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = self.registry = registry or CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(P + name, doc, labels, registry=reg)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(P + name, doc, labels, registry=reg)

        self.watched = gauge("watched_nodes", "Nodes in the cache")
        self.population = gauge("population_nodes", "Population size N of the circuit breaker")
        self.managed = gauge("managed_nodes", "Nodes in scope after exclusions")
        self.protected = gauge("protected_nodes", "Managed Nodes that are protected")
        self.unhealthy = gauge("unhealthy_nodes", "NotReady Nodes", ("set",))
        self.eligible = gauge("eligible_nodes", "Eligible Nodes")
        self.probes = counter("probes", "Per-address probe outcomes", ("kind", "family", "outcome"))
        self.probe_duration = Histogram(
            P + "probe_duration_seconds", "Per-address probe duration", ["kind"], registry=reg
        )
        self.in_flight = gauge("probes_in_flight", "Running probes")
        self.verdicts = counter("verdicts", "Node verdicts", ("verdict",))
        self.deletions = counter("deletions", "Deletion attempts", ("result",))
        self.skipped = counter("deletions_skipped", "Eligible Nodes not deleted", ("reason",))
        self.breaker_open = gauge("circuit_breaker_open", "1 while the circuit breaker is open")
        self.breaker_threshold = gauge("circuit_breaker_threshold", "Threshold T")
        self.self_check = gauge("self_check", "1 for the latest self-check result", ("result",))
        self.capability = gauge("probe_capability", "1 usable, 0 not", ("kind", "family"))
        self.unprobed = gauge("unprobed_mode", "1 in unprobed mode")
        self.leader = gauge("leader", "1 while this process holds the lease")
        self.transitions = counter("leader_transitions", "Times this process became leader")
        self.watch_restarts = counter("watch_restarts", "Watch re-establishments", ("reason",))
        self.api_requests = counter("api_requests", "API requests", ("verb", "resource", "code"))
        self.evaluation = Histogram(
            P + "evaluation_duration_seconds", "One evaluation pass", registry=reg
        )
        gauge("build_info", "Build information", ("version",)).labels(__version__).set(1)
        self._init_series()

    def _init_series(self) -> None:
        for kind in KINDS:
            for family in FAMILIES:
                for outcome in OUTCOMES:
                    self.probes.labels(kind, family, outcome)
        for name, values in (
            (self.verdicts, VERDICTS),
            (self.deletions, RESULTS),
            (self.skipped, SKIPS),
            (self.watch_restarts, WATCH_RESTARTS),
        ):
            for value in values:
                name.labels(value)
        for result in SELF_CHECK:
            self.self_check.labels(result).set(0)
        for subset in ("population", "managed"):
            self.unhealthy.labels(subset).set(0)  # fmt: skip

    def observe_request(self, verb: str, resource: str, code: str) -> None:
        self.api_requests.labels(verb, resource, code).inc()

    def set_self_check(self, result: str) -> None:
        for value in SELF_CHECK:
            self.self_check.labels(value).set(1 if value == result else 0)

    def set_in_flight(self, read: Callable[[], float]) -> None:
        self.in_flight.set_function(read)

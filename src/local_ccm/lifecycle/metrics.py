"""The node-lifecycle-controller's Prometheus metrics on a per-process registry. Every label
value is a closed set, every series exposed from the start: dashboards see zeros, not nothing.
"""

from __future__ import annotations

from typing import Final

from local_ccm import __version__
from local_ccm.runtime.metrics import Metrics, counter, gauge, histogram
from local_ccm.runtime.promtext import Registry

KINDS: Final = ("icmp", "tcp")
FAMILIES: Final = ("ipv4", "ipv6")
OUTCOMES: Final = ("reply", "no_reply", "no_route", "error")
VERDICTS: Final = ("reachable", "unreachable", "unknown")
RESULTS: Final = ("deleted", "gone", "failed", "aborted", "precondition_failed", "dry_run")
SKIPS: Final = ("breaker_open", "self_check_failed", "rate_limited", "reachable", "unknown")
SELF_CHECK: Final = ("passed", "failed", "skipped")
WATCH_RESTARTS: Final = ("gone", "error", "closed", "timeout")


class LifecycleMetrics(Metrics):
    """Every controller metric, registered on `registry` (a fresh one by default)."""

    prefix = "node_lifecycle_controller_"
    watched = gauge("watched_nodes", "Nodes in the cache")
    population = gauge("population_nodes", "Population size N of the circuit breaker")
    managed = gauge("managed_nodes", "Nodes in scope after exclusions")
    protected = gauge("protected_nodes", "Managed Nodes that are protected")
    unhealthy = gauge(
        "unhealthy_nodes", "NotReady Nodes", "set", series=[("population", "managed")]
    )
    eligible = gauge("eligible_nodes", "Eligible Nodes")
    probes = counter(
        "probes", "Per-address probe outcomes", "kind", "family", "outcome",
        series=[KINDS, FAMILIES, OUTCOMES],
    )  # fmt: skip
    probe_duration = histogram("probe_duration_seconds", "Per-address probe duration", "kind")
    in_flight = gauge("probes_in_flight", "Running probes")
    verdicts = counter("verdicts", "Node verdicts", "verdict", series=[VERDICTS])
    deletions = counter("deletions", "Deletion attempts", "result", series=[RESULTS])
    skipped = counter("deletions_skipped", "Eligible Nodes not deleted", "reason", series=[SKIPS])
    breaker_open = gauge("circuit_breaker_open", "1 while the circuit breaker is open")
    breaker_threshold = gauge("circuit_breaker_threshold", "Threshold T")
    self_check = gauge(
        "self_check", "1 for the latest self-check result", "result", series=[SELF_CHECK]
    )
    capability = gauge("probe_capability", "1 usable, 0 not", "kind", "family")
    unprobed = gauge("unprobed_mode", "1 in unprobed mode")
    leader = gauge("leader", "1 while this process holds the lease")
    transitions = counter("leader_transitions", "Times this process became leader")
    watch_restarts = counter(
        "watch_restarts", "Watch re-establishments", "reason", series=[WATCH_RESTARTS]
    )
    evaluation = histogram("evaluation_duration_seconds", "One evaluation pass")
    build_info = gauge("build_info", "Build information", "version")

    def __init__(self, registry: Registry | None = None) -> None:
        super().__init__(registry)
        self.build_info.labels(__version__).set(1)

    def set_self_check(self, result: str) -> None:
        for value in SELF_CHECK:
            self.self_check.labels(value).set(1 if value == result else 0)

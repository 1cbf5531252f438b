"""The node-lifecycle-controller's Prometheus metrics on a per-process registry. Every label
value is a closed set, every series exposed from the start: dashboards see zeros, not nothing.
"""

from __future__ import annotations

from typing import Final

from local_ccm.runtime.metrics import (
    WATCH_REASONS,
    ControllerMetrics,
    counter,
    gauge,
    histogram,
)
from local_ccm.runtime.promtext import Registry

KINDS: Final = ("icmp", "tcp")
FAMILIES: Final = ("ipv4", "ipv6")
OUTCOMES: Final = ("reply", "no_reply", "no_route", "error")
VERDICTS: Final = ("reachable", "unreachable", "unknown")
RESULTS: Final = ("deleted", "gone", "failed", "aborted", "precondition_failed", "dry_run")
SKIPS: Final = ("breaker_open", "self_check_failed", "rate_limited", "reachable", "unknown")
SELF_CHECK: Final = ("passed", "failed", "skipped")
SOURCES: Final = ("probe", "bmc", "unprobed")
FENCE_RESULTS: Final = ("requested", "gone", "aborted", "precondition_failed")


class LifecycleMetrics(ControllerMetrics):
    """Every controller metric, registered on `registry` (a fresh one by default)."""

    prefix = "local_ccm_lifecycle_"
    controller = "node-lifecycle"
    watched = gauge("watched_nodes", "Nodes in the cache")
    population = gauge("population_nodes", "Population size N of the circuit breaker")
    managed = gauge("managed_nodes", "Nodes in scope after exclusions")
    protected = gauge("protected_nodes", "Managed Nodes that are protected")
    unhealthy = gauge(
        "unhealthy_nodes", "NotReady Nodes", "set", series=[("population", "managed")]
    )
    eligible = gauge("eligible_nodes", "Eligible Nodes")
    probes = counter(
        "probes_total", "Per-address probe outcomes", "kind", "family", "outcome",
        series=[KINDS, FAMILIES, OUTCOMES],
    )  # fmt: skip
    probe_duration = histogram("probe_duration_seconds", "Per-address probe duration", "kind")
    in_flight = gauge("probes_in_flight", "Running probes")
    verdicts = counter("verdicts_total", "Node verdicts", "verdict", series=[VERDICTS])
    deletions = counter("deletions_total", "Deletion attempts", "result", series=[RESULTS])
    deleted_by_source = counter(
        "nodes_deleted_total", "Nodes deleted, by where the verdict came from", "source",
        series=[SOURCES],
    )  # fmt: skip
    fences = counter(
        "fence_requests_total", "Power-off requests written on NodeBMCs (node-bmc sends them)",
        "result", series=[FENCE_RESULTS],
    )  # fmt: skip
    skipped = counter(
        "deletions_skipped_total", "Eligible Nodes not deleted", "reason", series=[SKIPS]
    )
    breaker_open = gauge("circuit_breaker_open", "1 while the circuit breaker is open")
    breaker_threshold = gauge("circuit_breaker_threshold", "Threshold T")
    self_check = gauge(
        "self_check", "1 for the latest self-check result", "result", series=[SELF_CHECK]
    )
    capability = gauge("probe_capability", "1 usable, 0 not", "kind", "family")
    unprobed = gauge("unprobed_mode", "1 in unprobed mode")
    transitions = counter("leader_transitions_total", "Times this process became leader")
    evaluation = histogram("evaluation_duration_seconds", "One evaluation pass")

    def __init__(self, registry: Registry | None = None) -> None:
        super().__init__(registry)
        for reason in WATCH_REASONS:
            self.watch_restarts.labels(self.controller, "nodes", reason)

    def set_self_check(self, result: str) -> None:
        for value in SELF_CHECK:
            self.self_check.labels(value).set(1 if value == result else 0)

"""service-lb-ipam's Prometheus metrics on its own registry."""

from __future__ import annotations

from local_ccm.runtime.metrics import ControllerMetrics, counter, gauge, histogram

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class LbMetrics(ControllerMetrics):
    """Every metric of the allocator, registered on `registry` (a fresh one by default)."""

    prefix = "service_lb_ipam_"
    pool_addresses = gauge(
        "pool_addresses", "Addresses of a pool per family and state (used, free)",
        "pool", "family", "state",
    )  # fmt: skip
    allocations = counter(
        "allocations",
        "Service decisions written (result: allocated, AddressOutsidePools, or the problem reason)",
        "result",
    )  # fmt: skip
    releases = counter("releases", "Services whose addresses were released")
    allocation_latency = histogram(
        "allocation_latency_seconds",
        "From a Service first seen without an address to its address written",
        buckets=LATENCY_BUCKETS,
    )
    write_failures = counter("write_failures", "Failed writes", "resource", "code")

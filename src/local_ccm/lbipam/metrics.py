"""service-lb-ipam's Prometheus metrics on its own registry."""

from __future__ import annotations

from local_ccm.runtime.metrics import (
    ControllerMetrics,
    counter,
    gauge,
    histogram,
)

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class LbMetrics(ControllerMetrics):
    """Every metric of the allocator, registered on `registry` (a fresh one by default)."""

    prefix = "local_ccm_lb_"
    controller = "service-lb-ipam"
    pool_addresses = gauge(
        "pool_addresses", "Addresses of a pool per family and state (used, free)",
        "pool", "family", "state",
    )  # fmt: skip
    allocations = counter(
        "allocations_total",
        "Service decisions written (result: allocated, AddressOutsidePools, or the problem reason)",
        "result",
    )  # fmt: skip
    releases = counter("releases_total", "Services whose addresses were released")
    allocation_latency = histogram(
        "allocation_latency_seconds",
        "From a Service first seen without an address to its address written",
        buckets=LATENCY_BUCKETS,
    )
    writes = counter("writes_total", "Write requests by resource and answer code",
                     "resource", "code")  # fmt: skip
    write_failures = counter("write_failures_total", "Failed writes", "resource", "code")

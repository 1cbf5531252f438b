"""node-ipam-controller's Prometheus metrics on a per-process registry.

Pool series carry `cluster_cidr` (the family's pool CIDR text) and `cluster_cidr_name`; the
series of a deleted pool are removed [fix].
"""

from __future__ import annotations

from local_ccm.ipam.core.ledger import PoolUsage
from local_ccm.runtime.metrics import ControllerMetrics, counter, gauge, histogram
from local_ccm.runtime.promtext import Counter, Gauge

POOL = ("cluster_cidr", "cluster_cidr_name")
TRIES_BUCKETS = (1, 5, 25, 125, 625)
POOL_STATES = ("ready", "invalid", "frozen", "terminating")
WAIT_REASONS = ("no_matching_clustercidr", "exhausted", "write_pending")


class IpamMetrics(ControllerMetrics):
    """Every controller metric, registered on `registry` (a fresh one by default)."""

    prefix = "local_ccm_ipam_"
    controller = "node-ipam"
    allocations = counter("cidrs_allocations_total", "Blocks newly assigned", *POOL)
    releases = counter("cidrs_releases_total", "Blocks released", *POOL)
    max_cidrs = gauge("max_cidrs", "Capacity", *POOL)
    usage = gauge("cidrs_usage_ratio", "Allocated / capacity", *POOL)
    free = gauge("free_cidrs", "Free blocks", *POOL)
    unavailable = gauge("unavailable_cidrs", "Blocks blocked by other reservations", *POOL)
    tries = histogram(
        "allocation_tries_per_request", "Pools tried per successful allocation",
        buckets=TRIES_BUCKETS,
    )  # fmt: skip
    pools = gauge("clustercidrs", "Pools per state", "state", series=[POOL_STATES])
    waiting = gauge("nodes_waiting", "Nodes without CIDRs", "reason", series=[WAIT_REASONS])
    latency = histogram("allocation_latency_seconds", "Node first seen without CIDRs to written")
    node_writes = counter("node_writes_total", "Node PATCHes by answer code", "code")
    patch_failures = counter("node_patch_failures_total", "Failed Node writes", "code")
    foreign = counter(
        "foreign_allocations_total", "podCIDRs written by another allocator", "manager"
    )
    foreign_nodes = gauge(
        "nodes_with_foreign_cidrs", "Nodes whose podCIDRs another manager owns", "manager"
    )
    conflicts = gauge("cidr_conflicts", "Overlapping Node CIDR pairs")
    unowned = gauge("unowned_cidrs", "Node CIDRs owned by no pool")
    events_dropped = counter("events_dropped_total", "Events dropped under pressure")

    def set_pool(self, name: str, usage: PoolUsage) -> None:
        for fam in usage.families:
            labels = (str(fam.network), name)
            self.max_cidrs.labels(*labels).set(fam.capacity)
            self.usage.labels(*labels).set(fam.allocated / fam.capacity if fam.capacity else 0)
            self.free.labels(*labels).set(fam.free)
            self.unavailable.labels(*labels).set(fam.unavailable)

    def remove_pool(self, name: str) -> None:
        pooled: tuple[Counter | Gauge, ...] = (
            self.allocations, self.releases, self.max_cidrs, self.usage, self.free,
            self.unavailable,
        )  # fmt: skip
        for metric in pooled:
            for labels in metric.series():
                if labels[1] == name:
                    metric.remove(*labels)

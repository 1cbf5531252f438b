"""node-ipam-controller's Prometheus metrics on a per-process registry.

Pool series carry `clusterCIDR` (the family's pool CIDR text) and `clusterCIDRName`; the
series of a deleted pool are removed [fix].
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from local_ccm import __version__
from local_ccm.ipam.core.plan import PoolUsage

P = "node_ipam_controller_"
S = P + "multicidrset_"
POOL_LABELS = ("clusterCIDR", "clusterCIDRName")
TRIES_BUCKETS = (1, 5, 25, 125, 625)
POOL_STATES = ("ready", "invalid", "frozen", "terminating")
WAIT_REASONS = ("no_matching_clustercidr", "exhausted", "write_pending")


class IpamMetrics:
    """Every controller metric, registered on `registry` (a fresh one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = self.registry = registry or CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)
        self.allocations = Counter(
            S + "cidrs_allocations", "Blocks newly assigned", POOL_LABELS, registry=reg
        )
        self.releases = Counter(S + "cidrs_releases", "Blocks released", POOL_LABELS, registry=reg)
        self.max_cidrs = Gauge(S + "max_cidrs", "Capacity", POOL_LABELS, registry=reg)
        self.usage = Gauge(S + "usage_cidrs", "Allocated / capacity", POOL_LABELS, registry=reg)
        self.free = Gauge(S + "free_cidrs", "Free blocks", POOL_LABELS, registry=reg)
        self.unavailable = Gauge(
            S + "unavailable_cidrs", "Blocks blocked by other reservations", POOL_LABELS,
            registry=reg,
        )  # fmt: skip
        self.tries = Histogram(
            S + "allocation_tries_per_request", "Pools tried per successful allocation",
            buckets=TRIES_BUCKETS, registry=reg,
        )  # fmt: skip
        self.pools = Gauge(P + "clustercidrs", "Pools per state", ["state"], registry=reg)
        self.waiting = Gauge(P + "nodes_waiting", "Nodes without CIDRs", ["reason"], registry=reg)
        self.latency = Histogram(
            P + "allocation_latency_seconds", "Node first seen without CIDRs to written",
            registry=reg,
        )  # fmt: skip
        self.patch_failures = Counter(
            P + "node_patch_failures", "Failed Node writes", ["code"], registry=reg
        )
        self.foreign = Counter(
            P + "foreign_allocations", "podCIDRs written by another allocator", ["manager"],
            registry=reg,
        )  # fmt: skip
        self.foreign_nodes = Gauge(
            P + "nodes_with_foreign_cidrs", "Nodes whose podCIDRs another manager owns",
            ["manager"], registry=reg,
        )  # fmt: skip
        self.conflicts = Gauge(P + "cidr_conflicts", "Overlapping Node CIDR pairs", registry=reg)
        self.unowned = Gauge(P + "unowned_cidrs", "Node CIDRs owned by no pool", registry=reg)
        self.events_dropped = Counter(
            P + "events_dropped", "Events dropped under pressure", registry=reg
        )
        self.leader = Gauge(P + "leader", "1 while leading", registry=reg)
        self.watch_restarts = Counter(
            P + "watch_restarts", "Watch re-establishments", ["resource", "reason"], registry=reg
        )
        self.api_requests = Counter(
            P + "api_requests", "API requests", ["verb", "resource", "code"], registry=reg
        )
        self.build_info = Gauge(P + "build_info", "Build information", ["version"], registry=reg)
        self.build_info.labels(__version__).set(1)
        for state in POOL_STATES:
            self.pools.labels(state).set(0)
        for reason in WAIT_REASONS:
            self.waiting.labels(reason).set(0)

    def set_pool(self, name: str, usage: PoolUsage) -> None:
        for fam in usage.families:
            labels = (str(fam.network), name)
            self.max_cidrs.labels(*labels).set(fam.capacity)
            self.usage.labels(*labels).set(fam.allocated / fam.capacity if fam.capacity else 0)
            self.free.labels(*labels).set(fam.free)
            self.unavailable.labels(*labels).set(fam.unavailable)

    def remove_pool(self, name: str) -> None:
        """Drop every series of a deleted pool [fix]."""
        for metric in (self.allocations, self.releases, self.max_cidrs, self.usage, self.free):
            _remove_name(metric, name)
        _remove_name(self.unavailable, name)


def _remove_name(metric: Counter | Gauge, name: str) -> None:
    for sample_labels in list(_label_sets(metric)):
        if sample_labels[1] == name:
            metric.remove(*sample_labels)


def _label_sets(metric: Counter | Gauge) -> list[tuple[str, ...]]:
    # prometheus_client keeps children by label tuple; there is no public listing.
    return [tuple(labels) for labels in metric._metrics]

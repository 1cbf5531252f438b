"""The agent's Prometheus metrics on a per-process registry.

Label values are closed sets, except ``address`` on the info gauge (at most 4 series).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from local_ccm import __version__
from local_ccm.agent.core.candidates import Detection, DetectorKey, Disabled, Failed, Found
from local_ccm.agent.core.config import family_name

P = "local_ccm_"
TAINT_DELAY_BUCKETS = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)
BLOCK_REASONS = ("no_internal_ip", "provided_node_ip_mismatch", "provider_id_unavailable")


class AgentMetrics:
    """Every agent metric, registered on ``registry`` (a fresh one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = self.registry = registry or CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)
        self.build_info = Gauge(
            P + "build_info", "Build information", ["version", "python_version"], registry=reg
        )
        self.build_info.labels(__version__, platform.python_version()).set(1)
        self.detections = Counter(
            P + "detections_total", "Detector runs", ["type", "family", "result"], registry=reg
        )
        self.detected = Gauge(
            P + "detected_address_info",
            "Current detection result",
            ["type", "family", "address", "source"],
            registry=reg,
        )
        self.passes = Counter(
            P + "passes_total", "Reconcile passes", ["trigger", "outcome"], registry=reg
        )
        self.pass_duration = Histogram(
            P + "pass_duration_seconds", "Duration of one pass", registry=reg
        )
        self.writes = Counter(
            P + "node_writes_total", "PATCH outcomes", ["kind", "result"], registry=reg
        )
        self.api_requests = Counter(
            P + "api_requests_total", "API requests", ["verb", "resource", "code"], registry=reg
        )
        self.api_duration = Histogram(
            P + "api_request_duration_seconds",
            "Non-watch API request duration",
            ["verb", "resource"],
            registry=reg,
        )
        self.watch_restarts = Counter(
            P + "watch_restarts_total", "Watch re-establishments", ["reason"], registry=reg
        )
        self.netlink_events = Counter(
            P + "netlink_events_total", "Netlink notifications", ["kind"], registry=reg
        )
        self.taint_delay = Histogram(
            P + "taint_removal_delay_seconds",
            "Node creation to taint removal",
            buckets=TAINT_DELAY_BUCKETS,
            registry=reg,
        )
        self.blocked = Gauge(
            P + "initialization_blocked", "Taint held for this reason", ["reason"], registry=reg
        )
        self.mismatch = Gauge(
            P + "provided_node_ip_mismatch", "Provided node IP mismatch", ["family"], registry=reg
        )
        self.reverts = Counter(
            P + "address_reverts_total", "Address writes undone by others", registry=reg
        )
        self.conflict = Gauge(
            P + "address_conflict", "1 in the address-conflict state", registry=reg
        )
        self.last_sync = Gauge(
            P + "last_sync_timestamp_seconds", "Last time the Node matched", registry=reg
        )
        self.node_present = Gauge(
            P + "node_present", "0 while the Node object is absent", registry=reg
        )
        self._init_series()

    def _init_series(self) -> None:
        """Expose every closed-set series from the start, so dashboards see zeros."""
        for reason in BLOCK_REASONS:
            self.blocked.labels(reason).set(0)
        for family in ("ipv4", "ipv6"):
            self.mismatch.labels(family).set(0)
        for reason in ("timeout", "gone", "error", "closed"):
            self.watch_restarts.labels(reason)
        for kind in ("addr", "route", "link", "overflow"):
            self.netlink_events.labels(kind)
        self.node_present.set(1)

    def observe_request(self, verb: str, resource: str, code: str, seconds: float | None) -> None:
        self.api_requests.labels(verb, resource, code).inc()
        if seconds is not None:
            self.api_duration.labels(verb, resource).observe(seconds)

    def observe_detections(self, detected: Mapping[DetectorKey, Detection]) -> None:
        """Counter per attempt; the info gauge shows the current result only."""
        self.detected.clear()
        for (kind, family), d in sorted(detected.items()):
            if isinstance(d, Disabled):
                continue
            labels = ("internal" if kind == "InternalIP" else "external", family_name(family))
            result = "found" if isinstance(d, Found) else d.reason if isinstance(d, Failed) else ""
            self.detections.labels(*labels, result).inc()
            if isinstance(d, Found):
                self.detected.labels(kind, family_name(family), str(d.address), d.source).set(1)

    def observe_kept(self, kind: str, family: int, address: str) -> None:
        """A failed detector whose last good address stays on the Node."""
        self.detected.labels(kind, family_name(family), address, "kept").set(1)

"""The agent's Prometheus metrics on a per-process registry.

Label values are closed sets, except ``address`` on the info gauge (at most 4 series).
"""

from __future__ import annotations

from collections.abc import Mapping

from local_ccm.agent.core.candidates import Detection, DetectorKey, Disabled, Failed, Found
from local_ccm.agent.core.config import family_name
from local_ccm.runtime.metrics import Metrics, counter, gauge, histogram
from local_ccm.runtime.promtext import Registry

TAINT_DELAY_BUCKETS = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)
BLOCK_REASONS = ("no_internal_ip", "provided_node_ip_mismatch", "provider_id_unavailable")
WATCH_RESTARTS = ("timeout", "gone", "error", "closed")
NETLINK_KINDS = ("addr", "route", "link", "overflow")
RELOAD_RESULTS = ("loaded", "invalid")


class AgentMetrics(Metrics):
    """Every agent metric, registered on ``registry`` (a fresh one by default)."""

    prefix = "local_ccm_agent_"
    detections = counter("detections_total", "Detector runs", "type", "family", "result")
    detected = gauge(
        "detected_address_info", "Current detection result", "type", "family", "address", "source"
    )
    passes = counter("passes_total", "Reconcile passes", "trigger", "outcome")
    pass_duration = histogram("pass_duration_seconds", "Duration of one pass")
    writes = counter("node_writes_total", "PATCH outcomes", "kind", "result")
    watch_restarts = counter(
        "watch_restarts_total", "Watch re-establishments", "reason", series=[WATCH_RESTARTS]
    )
    netlink_events = counter(
        "netlink_events_total", "Netlink notifications", "kind", series=[NETLINK_KINDS]
    )
    taint_delay = histogram(
        "taint_removal_delay_seconds", "Node creation to taint removal", buckets=TAINT_DELAY_BUCKETS
    )
    blocked = gauge(
        "initialization_blocked", "Taint held for this reason", "reason", series=[BLOCK_REASONS]
    )
    mismatch = gauge(
        "provided_node_ip_mismatch",
        "Provided node IP mismatch",
        "family",
        series=[("ipv4", "ipv6")],
    )
    reverts = counter("address_reverts_total", "Address writes undone by others")
    conflict = gauge("address_conflict", "1 in the address-conflict state")
    last_sync = gauge("last_sync_timestamp_seconds", "Last time the Node matched")
    node_present = gauge("node_present", "0 while the Node object is absent")
    rules_valid = gauge("metadata_rules_valid", "0 while the metadata rules file does not load")
    rules_reloads = counter(
        "metadata_rules_reloads_total", "Metadata rules file reloads", "result",
        series=[RELOAD_RESULTS],
    )  # fmt: skip

    def __init__(self, registry: Registry | None = None) -> None:
        super().__init__(registry)
        self.node_present.set(1)
        self.rules_valid.set(1)

    def observe_rules_reload(self, problems: list[str] | None) -> None:
        """A changed rules file: loaded (``None``) or kept the last good rules."""
        self.rules_reloads.labels("invalid" if problems else "loaded").inc()
        self.rules_valid.set(0 if problems else 1)

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

"""kubelet-serving-approver's Prometheus metrics on its own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from local_ccm import __version__
from local_ccm.runtime.metrics import Metrics, counter, gauge

DECISIONS = ("approve", "deny", "wait")


class CsrMetrics(Metrics):
    """Every metric of the approver, registered on `registry` (a fresh one by default)."""

    prefix = "kubelet_serving_approver_"
    decisions = counter(
        "csr_decisions", "CSR decisions taken (wait: left pending)", "decision", "reason"
    )
    write_failures = counter("csr_write_failures", "Failed approval writes", "code")
    watch_restarts = counter("watch_restarts", "Watch re-establishments", "resource", "reason")
    leader = gauge("leader", "1 while leading")
    build_info = gauge("build_info", "Build information", "version")

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        self.build_info.labels(__version__).set(1)

"""kubelet-serving-approver's Prometheus metrics on its own registry."""

from __future__ import annotations

from local_ccm.runtime.metrics import ControllerMetrics, QueueMetrics, counter
from local_ccm.runtime.promtext import Registry


class CsrMetrics(ControllerMetrics):
    """Every metric of the approver, registered on `registry` (a fresh one by default)."""

    prefix = "local_ccm_csr_"
    controller = "kubelet-serving-approver"
    decisions = counter(
        "decisions_total", "CSR decisions taken (wait: left pending)", "decision", "reason"
    )
    write_failures = counter("write_failures_total", "Failed approval writes", "code")

    def __init__(self, registry: Registry | None = None) -> None:
        super().__init__(registry)
        self.queue = QueueMetrics(self.registry, "csr", self.controller)

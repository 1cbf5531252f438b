"""kubelet-serving-approver's Prometheus metrics on its own registry."""

from __future__ import annotations

from local_ccm.csr.core.decide import REASONS
from local_ccm.runtime.metrics import ControllerMetrics, counter
from local_ccm.runtime.promtext import Registry


class CsrMetrics(ControllerMetrics):
    """Every metric of the approver, registered on `registry` (a fresh one by default).
    Every (decision, reason) a decision can carry is exposed at zero from the start: the
    first denial of a process must be an increase for `LocalCcmCsrDenied` to fire."""

    prefix = "local_ccm_csr_"
    controller = "kubelet-serving-approver"
    queue_name = "csr"
    decisions = counter(
        "decisions_total", "CSR decisions taken (wait: left pending)", "decision", "reason"
    )
    write_failures = counter("write_failures_total", "Failed approval writes", "code")

    def __init__(self, registry: Registry | None = None) -> None:
        super().__init__(registry)
        for decision, reasons in REASONS.items():
            for reason in reasons:
                self.decisions.labels(decision, reason)

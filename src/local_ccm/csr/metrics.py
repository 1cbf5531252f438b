"""kubelet-serving-approver's Prometheus metrics on its own registry."""

from __future__ import annotations

from local_ccm.runtime.metrics import ControllerMetrics, counter


class CsrMetrics(ControllerMetrics):
    """Every metric of the approver, registered on `registry` (a fresh one by default)."""

    prefix = "local_ccm_csr_"
    controller = "kubelet-serving-approver"
    queue_name = "csr"
    decisions = counter(
        "decisions_total", "CSR decisions taken (wait: left pending)", "decision", "reason"
    )
    write_failures = counter("write_failures_total", "Failed approval writes", "code")

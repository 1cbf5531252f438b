"""kubelet-serving-approver's Prometheus metrics on its own registry."""

from __future__ import annotations

from local_ccm.runtime.metrics import ControllerMetrics, counter


class CsrMetrics(ControllerMetrics):
    """Every metric of the approver, registered on `registry` (a fresh one by default)."""

    prefix = "kubelet_serving_approver_"
    decisions = counter(
        "csr_decisions", "CSR decisions taken (wait: left pending)", "decision", "reason"
    )
    write_failures = counter("csr_write_failures", "Failed approval writes", "code")

"""node-bmc's Prometheus metrics on its own registry."""

from __future__ import annotations

from local_ccm.bmc.core.observation import FAILURES, POWER_STATUSES
from local_ccm.runtime.metrics import ControllerMetrics, counter, gauge, histogram

# A BMC answers in milliseconds to seconds; the read timeout is 10 s (plus 5 s to connect).
REDFISH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0)
TAINT_ACTIONS = ("add", "remove")
WRITE_RESULTS = ("success", "conflict", "error")
POWER_OFF_OUTCOMES = ("sent", "confirmed", "failed", "refused")


class BmcMetrics(ControllerMetrics):
    """Every metric of node-bmc, registered on `registry` (a fresh one by default)."""

    prefix = "local_ccm_bmc_"
    controller = "node-bmc"
    power_states = gauge(
        "power_states",
        "NodeBMCs by the power state their last poll recorded (Unknown: no answer)",
        "state", series=[POWER_STATUSES],
    )  # fmt: skip
    errors = counter(
        "errors_total", "Failed polls by reason (the Reachable condition's)", "reason",
        series=[FAILURES],
    )  # fmt: skip
    request_duration = histogram(
        "redfish_request_duration_seconds",
        "Redfish requests to BMCs by method, from sending to the answer or the failure",
        "method", buckets=REDFISH_BUCKETS,
    )  # fmt: skip
    power_offs = counter(
        "power_offs_total", "Power-off requests by outcome: ForceOff sent, Off confirmed "
        "(also without a ForceOff: already Off), failed (not Off in time), refused",
        "outcome", series=[POWER_OFF_OUTCOMES],
    )  # fmt: skip
    taint_writes = counter(
        "taint_writes_total", "Writes of the shutdown taint by action and result",
        "action", "result", series=[TAINT_ACTIONS, WRITE_RESULTS],
    )  # fmt: skip

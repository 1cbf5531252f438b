"""What node-lifecycle-controller adds to the process runtime's health checks (its evaluations
and its Node cache) and its leader gauge."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from local_ccm.clock import Clock
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.runtime import process
from local_ccm.runtime.serve import Checks


@dataclass
class Status(process.Status):
    """The runtime's status plus what the loop reports."""

    synced: bool = False
    connected: bool = False
    disconnected_at: float | None = None
    last_evaluation: float | None = None
    probe_problem: str = ""  # set at start-up when no configured probe is usable


def add_checks(
    healthz: Checks, readyz: Checks, status: Status, clock: Clock, interval: float
) -> None:
    """The loop's checks: evaluations keep coming while leading, the Node cache is fresh, some
    configured probe is usable."""

    def evaluating() -> tuple[bool, str]:
        limit = max(3 * interval, 60.0)
        last = status.last_evaluation
        if not status.leading or not status.synced or last is None:
            return True, ""
        ok = clock.monotonic() - last < limit
        return ok, "" if ok else f"no evaluation completed within {limit:g}s"

    def node_cache() -> tuple[bool, str]:
        if not status.leading:
            return True, ""  # a standing-by candidate is ready
        if not status.synced:
            return False, "the Node cache is not synced"
        gone = status.disconnected_at
        if status.connected or gone is None or clock.monotonic() - gone < 2 * interval:
            return True, ""
        return False, "the Node watch is disconnected"

    def probes() -> tuple[bool, str]:
        # Not ready, not a crash: the controller keeps running (with node IPAM beside it in the
        # controller manager), every verdict is unknown and nothing is deleted.
        return not status.probe_problem, status.probe_problem

    healthz.add("evaluation", evaluating)
    readyz.add("node-cache", node_cache)
    readyz.add("probe", probes)


def leader_callback(status: Status, metrics: LifecycleMetrics) -> Callable[[bool], None]:
    def changed(leading: bool) -> None:
        status.leading = leading
        if leading:
            metrics.transitions.inc()
        else:
            status.synced = False

    return changed

"""What node-lifecycle-controller adds to the process runtime's health checks beside its
controller's `ready()` (the Node cache, /readyz `node-cache`): evaluations keep coming
(/healthz) and some configured probe is usable (/readyz, a fact of the process, a standby's
too), and the leader gauge."""

from __future__ import annotations

from collections.abc import Callable

from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.runtime.serve import Checks

Check = Callable[[], tuple[bool, str]]


def add_checks(healthz: Checks, readyz: Checks, *, evaluating: Check, probe_problem: str) -> None:
    """`evaluating`: the running controller's liveness; `probe_problem`: set at start-up when
    no configured probe is usable."""

    def probes() -> tuple[bool, str]:
        # Not ready, not a crash: the controller keeps running (with node IPAM beside it in the
        # controller manager), every verdict is unknown and nothing is deleted.
        return not probe_problem, probe_problem

    healthz.add("evaluation", evaluating)
    readyz.add("probe", probes)


def leader_callback(metrics: LifecycleMetrics) -> Callable[[bool], None]:
    def changed(leading: bool) -> None:
        if leading:
            metrics.transitions.inc()

    return changed

"""`/readyz` of node-ipam-controller's leader.

Pure, no I/O: times are parameters. Ready means recovery finished, some pool source
exists, and every watch is connected or has been reconnecting for less than
`WATCH_GRACE` seconds. "Reconnecting" is a watch re-establishing its stream without errors (the
periodic stream renewal, a relist after 410 Gone, which may take seconds with thousands of
Nodes); a watch whose last attempt failed (the API server unreachable or answering errors)
counts at once, so /readyz is 503 during an API server outage.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from local_ccm.kube.informer import WatchStatus
from local_ccm.records import dataclass

WATCH_GRACE = 60.0


@dataclass(frozen=True)
class WatchState:
    """One watch: connected (`down_since` None) or without a stream since `down_since`."""

    down_since: float | None = None
    failing: bool = False


def observe_watch(state: WatchState, status: WatchStatus, now: float) -> WatchState:
    """The state after looking at the watch at `now`; the outage starts when first seen."""
    if status == "connected":
        return WatchState()
    return WatchState(now if state.down_since is None else state.down_since, status == "failing")


def watch_problems(
    states: Iterable[tuple[str, WatchState]], now: float, grace: float = WATCH_GRACE
) -> list[str]:
    problems = []
    for name, state in sorted(states, key=lambda item: item[0]):
        if state.down_since is None:
            continue
        down = now - state.down_since
        if state.failing:
            problems.append(f"watch of {name} failing for {down:.0f}s: API server unavailable")
        elif down >= grace:
            problems.append(f"watch of {name} reconnecting for {down:.0f}s (limit {grace:.0f}s)")
    return problems


def readiness(*, recovered: bool, pool_source: bool, problems: Sequence[str]) -> tuple[bool, str]:
    if not recovered:
        return False, "start-up recovery has not finished"
    if not pool_source:
        return False, "no ClusterCIDR API and no --cluster-cidr: nothing can be allocated"
    if problems:
        return False, "; ".join(problems)
    return True, "ok"

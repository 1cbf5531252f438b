"""The process around the node-lifecycle-controller's loop:
leadership (the loop runs only while leading; losing the lease exits 3), the graceful stop, the
watchdog and the health checks the HTTP server reads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from local_ccm.clock import Clock
from local_ccm.lease.elector import LeaderContext, LeaderElector, LeadershipLost
from local_ccm.lifecycle.metrics import LifecycleMetrics
from local_ccm.runtime.serve import Checks

log = logging.getLogger(__name__)

WATCHDOG_TICK = 1.0
WATCHDOG_LIMIT = 10.0  # /healthz fails when the loop has not ticked for this long
EXIT_OK, EXIT_LEADERSHIP = 0, 3


class Runnable(Protocol):
    """What `run_controller` runs for one leadership term (the loop's `Controller`)."""

    async def run(self) -> None: ...


@dataclass
class Status:
    """Plain values the health checks read from the HTTP server's thread."""

    # Why the process is not ready yet during start-up (None once the permission check passed):
    # /readyz reports it while /healthz already answers, so an API server outage at start is
    # "not ready", never a liveness failure.
    waiting: str | None = None
    leading: bool = False
    synced: bool = False
    connected: bool = False
    disconnected_at: float | None = None
    last_evaluation: float | None = None
    last_tick: float | None = None


def health_checks(status: Status, clock: Clock, interval: float) -> tuple[Checks, Checks]:
    """(/healthz, /readyz). API outages fail readiness, never liveness."""
    healthz, readyz = Checks(), Checks()

    def loop_alive() -> tuple[bool, str]:
        tick = status.last_tick
        ok = tick is not None and clock.monotonic() - tick < WATCHDOG_LIMIT
        return ok, "" if ok else "the event loop has not ticked for 10s"

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

    def started() -> tuple[bool, str]:
        waiting = status.waiting
        return waiting is None, waiting or ""

    healthz.add("loop", loop_alive)
    healthz.add("evaluation", evaluating)
    readyz.add("config", lambda: (True, ""))
    readyz.add("start-up", started)
    readyz.add("node-cache", node_cache)
    return healthz, readyz


def leader_callback(status: Status, metrics: LifecycleMetrics) -> Callable[[bool], None]:
    def changed(leading: bool) -> None:
        status.leading = leading
        metrics.leader.set(1 if leading else 0)
        if leading:
            metrics.transitions.inc()
        else:
            status.synced = False

    return changed


# ------------------------------------------------------------------ the process
ControllerFactory = Callable[[LeaderContext | None], Runnable]


async def run_controller(
    make: ControllerFactory,
    clock: Clock,
    status: Status,
    *,
    elector: LeaderElector | None,
    stop: asyncio.Event,
) -> int:
    """Run until `stop` (exit 0, lease released) or leadership is lost (exit 3). Without an
    elector the controller acts at once (--leader-elect=false). The watchdog runs around it
    (see `run_watchdog`), started before the permission check."""
    if elector is None:
        await _until_stopped(asyncio.ensure_future(make(None).run()), stop)
        return EXIT_OK

    async def lead(context: LeaderContext) -> None:
        await make(context).run()

    campaign = asyncio.ensure_future(elector.run(lead))
    try:
        await _until_stopped(campaign, stop, on_stop=elector.stop)
    except LeadershipLost as exc:
        log.error("leadership lost: %s; exiting", exc)
        return EXIT_LEADERSHIP
    return EXIT_OK


async def _until_stopped(
    work: asyncio.Future[None], stop: asyncio.Event, on_stop: Callable[[], None] | None = None
) -> None:
    """Wait for `work`; on `stop`, ask it to stop (or cancel it) and wait for it to end."""
    stopper = asyncio.ensure_future(stop.wait())
    waiting: set[asyncio.Future[Any]] = {work, stopper}
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if not work.done():
        log.info("stopping")
        if on_stop is not None:
            on_stop()
        else:
            work.cancel()
    try:
        await work
    except asyncio.CancelledError:
        if not stop.is_set():
            raise


async def run_watchdog(status: Status, clock: Clock) -> None:
    """Tick `status.last_tick` for /healthz's loop check, from the moment the health server
    listens until the process ends (a task the caller cancels)."""
    while True:
        status.last_tick = clock.monotonic()
        await clock.sleep(WATCHDOG_TICK)

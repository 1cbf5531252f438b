"""The one process runtime every binary goes through, in this order:

1. the health server listens at once: `/healthz` 200 while the event loop answers, `/readyz` 503
   with the reason until start-up is done (an API server outage at start is "not ready", never
   a liveness failure); a listen flag this host cannot serve is one line and exit 2;
2. the permission check (`runtime.access`), retried with backoff while the API server does not
   answer; rejected credentials or a missing permission exit 4. A process that sets
   `check_on_refusal` (the node agent: every request at start-up counts, times every Node)
   starts its work at once and runs the same check when the API server first refuses one of
   its requests (403): a missing permission still exits 4, listing every one;
3. leader election where enabled: the controllers run only while leading, losing the Lease
   exits 3;
4. the controllers (each syncs its informers before acting);
5. SIGTERM/SIGINT: the controllers stop (pending writes and Events flushed within a grace), the
   Lease is released, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, TypeVar

from local_ccm.clock import Clock, Stopped, unless_stopped
from local_ccm.kube.nodes import Access
from local_ccm.records import dataclass
from local_ccm.runtime.access import Reviews, check_access
from local_ccm.runtime.serve import BindError, Checks, Servers

if TYPE_CHECKING:  # the elector is imported when a process elects (the agent never does)
    from local_ccm.lease.elector import LeaderContext, LeaderElector

log = logging.getLogger(__name__)
T = TypeVar("T")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_LOST, EXIT_PRECONDITION = 0, 1, 2, 3, 4
WATCHDOG_LIMIT = 10.0  # /healthz fails when the event loop has not answered for this long
RECHECK_AFTER = 300.0  # with check_on_refusal: refusals this soon after a clean check wait
WAITING = "waiting for the API server"

Work = Callable[["LeaderContext | None"], Awaitable[int | None]]  # an exit status, or None: 0


@dataclass
class Status:
    """Plain values the health checks read from the HTTP server's thread.

    The loop check wakes nothing while nobody probes: a probe asks the event loop to answer
    (``ask`` schedules the answer from the HTTP thread) and the loop is stuck once a question
    stays unanswered for ``WATCHDOG_LIMIT``. Without ``ask``, ``last_tick`` is read as is."""

    waiting: str | None = None  # why start-up is not done yet (run_process sets it)
    leading: bool = False
    last_tick: float | None = None  # when the event loop last answered
    ask: Callable[[], None] | None = None
    asked: float | None = None  # when the unanswered question was asked


def process_checks(status: Status, clock: Clock) -> tuple[Checks, Checks]:
    """(/healthz, /readyz) with the checks every binary has; components add their own."""
    healthz, readyz = Checks(), Checks()

    def loop_alive() -> tuple[bool, str]:
        now, ask, asked = clock.monotonic(), status.ask, status.asked
        if ask is not None and asked is None:
            asked = status.asked = now  # read once: the loop may answer before the check ends
            with contextlib.suppress(RuntimeError):  # a closed loop never answers
                ask()
        since = asked if ask is not None else status.last_tick
        ok = since is not None and now - since < WATCHDOG_LIMIT
        return ok, "" if ok else f"the event loop has not answered for {WATCHDOG_LIMIT:g}s"

    def started() -> tuple[bool, str]:
        waiting = status.waiting
        return waiting is None, waiting or ""

    healthz.add("loop", loop_alive)
    readyz.add("start-up", started)
    return healthz, readyz


@dataclass(frozen=True)
class Process:
    """What a binary hands to `run_process`; `cli` builds one per binary."""

    prog: str
    clock: Clock
    stop: asyncio.Event
    serve: Callable[[Checks, Checks], Servers]  # raises BindError
    reviews: Reviews
    permissions: Sequence[Access]
    work: Work
    elector: LeaderElector | None = None
    status: Status = field(default_factory=Status)
    checks: tuple[Checks, Checks] | None = None  # default: process_checks(status, clock)
    optional: Sequence[Access] = ()  # missing: a warning (e.g. secure metrics' reviews)
    grace: float | None = None  # how long a stop waits for the work before cancelling it
    on_stop: Callable[[], None] | None = None  # without election: asks the work to stop
    on_running: Callable[[Servers], None] | None = None
    check_on_refusal: asyncio.Event | None = None  # set on a 403: the check then, not first


async def run_process(p: Process) -> int:
    """Health server, permission check, election, work; the exit status."""
    healthz, readyz = p.checks or process_checks(p.status, p.clock)
    p.status.waiting = WAITING
    try:
        servers = p.serve(healthz, readyz)
    except BindError as exc:  # a listen flag this host cannot serve: bad input
        print(f"{p.prog}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    answer_probes(p.status, p.clock)
    try:
        if p.check_on_refusal is None and (refused := await _check_access(p)) is not None:
            return refused
        p.status.waiting = None
        if p.on_running is not None:
            p.on_running(servers)
        work = p.work if p.check_on_refusal is None else _checked_on_refusal(p, p.check_on_refusal)
        return await run_elected(work, elector=p.elector, stop=p.stop, grace=p.grace,
                                 on_stop=p.on_stop)  # fmt: skip
    finally:
        p.status.ask = None
        servers.close()


def _checked_on_refusal(p: Process, refused: asyncio.Event) -> Work:
    """`p.work`, and the permission check each time `refused` is set (at most once per
    `RECHECK_AFTER`): a missing permission cancels the work and exits 4; with nothing missing
    (an admission policy refused a write, say) the work goes on."""

    async def work(context: LeaderContext | None) -> int | None:
        main = asyncio.ensure_future(p.work(context))
        try:
            while True:
                waiter = asyncio.ensure_future(refused.wait())
                await asyncio.wait({main, waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if refused.is_set() and (code := await _check_access(p)) is not None:
                    return code if code == EXIT_PRECONDITION or not main.done() else main.result()
                if main.done():
                    return main.result()
                await asyncio.wait({main}, timeout=RECHECK_AFTER)  # one check per burst
                refused.clear()
        finally:
            main.cancel()
            await asyncio.gather(main, return_exceptions=True)

    return work


async def _check_access(p: Process) -> int | None:
    """None when every required permission is there; else the exit status."""

    def waiting(error: str) -> None:
        p.status.waiting = f"{WAITING}: {error}"

    wanted = [*p.permissions, *p.optional]
    checked = await unless_stopped(
        check_access(p.reviews, wanted, p.stop, p.clock, on_error=waiting), p.stop
    )
    if isinstance(checked, Stopped) or checked is None or p.stop.is_set():
        return EXIT_OK  # stopped before the API server answered
    if isinstance(checked, str):
        log.error("start-up precondition failed: %s", checked)
        return EXIT_PRECONDITION
    required = [str(m) for m in checked if m not in p.optional]
    if required:
        log.error("start-up precondition failed: missing RBAC permissions: %s",
                  "; ".join(required))  # fmt: skip
        return EXIT_PRECONDITION
    if checked:
        log.warning("/metrics answers 503 to every scrape: the ClusterRole lacks %s "
                    "(or run with --metrics-secure=false)",
                    " and ".join(str(m) for m in checked))  # fmt: skip
    return None


async def run_elected(
    work: Work,
    *,
    elector: LeaderElector | None,
    stop: asyncio.Event,
    grace: float | None = None,
    on_stop: Callable[[], None] | None = None,
) -> int:
    """Run `work` until `stop` (exit 0, Lease released) or leadership is lost (exit 3). Without
    an elector the work runs at once (--leader-elect=false) and its exit status is returned."""
    if elector is None:
        done = await until_stopped(asyncio.ensure_future(work(None)), stop, on_stop=on_stop,
                                   grace=grace)  # fmt: skip
        return done or EXIT_OK

    from local_ccm.lease.elector import LeadershipLost  # noqa: PLC0415

    async def lead(context: LeaderContext) -> None:
        await work(context)

    campaign = asyncio.ensure_future(elector.run(lead))
    try:
        await until_stopped(campaign, stop, on_stop=elector.stop, grace=grace)
    except LeadershipLost as exc:
        log.error("leadership lost: %s; exiting", exc)
        return EXIT_LOST
    return EXIT_OK


async def until_stopped(
    work: asyncio.Future[T],
    stop: asyncio.Event,
    *,
    on_stop: Callable[[], None] | None = None,
    grace: float | None = None,
) -> T | None:
    """Wait for `work`; on `stop`, ask it to stop (`on_stop`, else cancel) and wait for it to
    end, cancelling it after `grace` seconds."""
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
            await asyncio.wait({work}, timeout=grace)
        if not work.done():
            work.cancel()
    try:
        return await work
    except asyncio.CancelledError:
        if not stop.is_set():
            raise
    return None


def answer_probes(status: Status, clock: Clock) -> None:
    """From now on /healthz's questions are answered on the running event loop."""
    loop = asyncio.get_running_loop()

    def answer() -> None:
        status.last_tick, status.asked = clock.monotonic(), None

    def ask() -> None:
        loop.call_soon_threadsafe(answer)

    answer()
    status.ask = ask
